"""How a run proceeds: statuses, the pure conductor, people's commands, approval policy, and ports."""
