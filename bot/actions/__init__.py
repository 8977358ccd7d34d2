"""What a step can do: the action registry, the Kubernetes/EC2/flow actions, and the interlocks."""
