-- 009_worker_programs: what an agent said about program jobs (issue 26) in
-- its last REGISTER: {"programs": bool, "program_ports": [lo, hi],
-- "advertise": str} (coordinatord/program.c), kept so that a restarted
-- coordinator places program jobs on agents that do not register again.
-- NULL: not said (an older agent, or none since this migration).
ALTER TABLE workers ADD COLUMN program_json TEXT;
