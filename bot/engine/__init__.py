"""How a run proceeds: statuses, the pure conductor, people's commands, approval policy, ports, and
the facts about runbooks and runs that front-ends show."""
