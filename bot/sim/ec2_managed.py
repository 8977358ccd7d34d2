"""EC2 managed instances: the machines EKS Auto Mode owns, which nobody else may stop or terminate.

An instance that EKS Auto Mode launched is an EC2 *managed instance*: DescribeInstances answers
its ``Operator`` (``Managed: true``, ``Principal: eks.amazonaws.com``), and its owner alone
changes it ("You can't directly modify the settings of a managed instance", EC2 User Guide,
"Amazon EC2 managed instances"; EKS's "Learn about Amazon EKS Auto Mode managed instances": EKS
creates, deletes and patches them). AWS does not document the error code a customer's
StopInstances or TerminateInstances gets; the sandbox answers ``OperationNotPermitted`` (the
code EC2 gives for the other "this instance may not be changed this way" refusals, stop and
termination protection), which is our best reading. The owner's own path (Auto Mode's Karpenter
terminating the instance of a deleted NodeClaim) is ``Ec2Sim.terminate_now``, which no refusal
applies to.

moto has no ``Operator``: ``rewrite`` adds it to the DescribeInstances items of managed instances.
"""

from __future__ import annotations

from xml.etree import ElementTree

from bot.sim.ec2_instances import Ec2Refusal

EKS = "eks.amazonaws.com"


class ManagedInstances:
    def __init__(self) -> None:
        self.operators: dict[str, str] = {}  # instance id -> the principal that manages it

    def manage(self, instance_id: str, principal: str = EKS) -> None:
        self.operators[instance_id] = principal

    def refuse(self, action: str, instance_id: str) -> None:
        """Raise EC2's refusal when a customer asks to stop or terminate a managed instance."""
        principal = self.operators.get(instance_id)
        if principal is None:
            return
        verb = "stopped" if action == "StopInstances" else "terminated"
        raise Ec2Refusal("OperationNotPermitted", (
            f"The instance '{instance_id}' is a managed instance of {principal} and may not be "
            f"{verb} directly: its operator manages its lifecycle."))

    def rewrite(self, body: bytes) -> bytes:
        if not self.operators:
            return body
        root = ElementTree.fromstring(body)
        changed = False
        for item in root.iter():
            if not item.tag.endswith("}item") and item.tag != "item":
                continue
            ns = item.tag[:-len("item")]
            iid = item.findtext(f"{ns}instanceId")
            if iid not in self.operators or item.find(f"{ns}imageId") is None \
                    or item.find(f"{ns}operator") is not None:
                continue  # only the instances themselves, not nested items naming them
            op = ElementTree.SubElement(item, f"{ns}operator")
            ElementTree.SubElement(op, f"{ns}managed").text = "true"
            ElementTree.SubElement(op, f"{ns}principal").text = self.operators[iid]
            changed = True
        if not changed:
            return body
        return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
