"""How a run proceeds: statuses, the pure conductor, approval policy, ports, and the runner."""
