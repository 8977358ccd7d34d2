CREATE TABLE events (
	run_id VARCHAR(16) NOT NULL, 
	seq INTEGER NOT NULL, 
	ts VARCHAR(40) NOT NULL, 
	actor VARCHAR(200) NOT NULL, 
	type VARCHAR(60) NOT NULL, 
	payload TEXT NOT NULL, 
	prev_hash VARCHAR(64) NOT NULL, 
	hash VARCHAR(64) NOT NULL, 
	PRIMARY KEY (run_id, seq)
);

CREATE TABLE runs (
	id VARCHAR(16) NOT NULL, 
	runbook VARCHAR(63) NOT NULL, 
	status VARCHAR(20) NOT NULL, 
	requester VARCHAR(200) NOT NULL, 
	channel VARCHAR(100), 
	dry_run BOOLEAN NOT NULL, 
	created_at VARCHAR(40) NOT NULL, 
	header TEXT NOT NULL, 
	runbook_text TEXT NOT NULL, 
	version INTEGER NOT NULL, 
	next_check_at FLOAT, 
	lease_owner VARCHAR(200), 
	lease_until FLOAT, 
	audit_seq INTEGER NOT NULL, 
	audit_hash VARCHAR(64), 
	PRIMARY KEY (id)
);

CREATE INDEX ix_runs_channel ON runs (channel);

CREATE INDEX ix_runs_next_check_at ON runs (next_check_at);

CREATE INDEX ix_runs_status ON runs (status);

CREATE TABLE steps (
	run_id VARCHAR(16) NOT NULL, 
	key VARCHAR(100) NOT NULL, 
	position INTEGER NOT NULL, 
	state TEXT NOT NULL, 
	PRIMARY KEY (run_id, key)
);

CREATE TABLE slack_deliveries (
	key VARCHAR(200) NOT NULL, 
	seen_at FLOAT NOT NULL, 
	PRIMARY KEY (key)
);

CREATE TABLE slack_messages (
	run_id VARCHAR(16) NOT NULL, 
	key VARCHAR(200) NOT NULL, 
	channel VARCHAR(40) NOT NULL, 
	ts VARCHAR(40) NOT NULL, 
	PRIMARY KEY (run_id, key)
);

CREATE TABLE slack_runs (
	run_id VARCHAR(16) NOT NULL, 
	drawn_version INTEGER NOT NULL, 
	replied_seq INTEGER NOT NULL, 
	retry_at FLOAT, 
	failures INTEGER NOT NULL, 
	owner VARCHAR(200), 
	owner_until FLOAT, 
	done BOOLEAN NOT NULL, 
	PRIMARY KEY (run_id)
);

CREATE INDEX ix_slack_runs_done ON slack_runs (done);
