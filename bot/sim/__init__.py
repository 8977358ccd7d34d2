"""The sandbox: a simulated Kubernetes-on-AWS cluster (fake API server, controllers, EC2 on moto)."""
