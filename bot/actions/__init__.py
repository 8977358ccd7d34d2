"""What a step can do: the actions (Kubernetes, EC2, reports, flow), their registry, and the interlocks.

Each action is one ``ActionSpec`` beside its implementation; ``builtin.py`` lists the shipped ones;
``catalog.py`` serves them to the engine. An action imports what it is written with from one
module, ``authoring.py``. docs/actions.md ("Adding an action") walks through adding one.
"""
