"""How a run proceeds: statuses, the pure conductor, approval policy, ports, the runner, and the
facts about runbooks and runs that front-ends show."""
