/*
 * fabric_int: the fabric's state, shared by its modules (fabric.c and the
 * agents, attempt, kv, ranks, snapcommit, placement and scheduler modules) and
 * by their unit tests; nothing outside coordinatord/fabric*.c and those
 * modules includes it.
 *
 * Memory model: agents live in `agents` (by node) for the life of the
 * fabric, dead ones included, so pointers to them stay valid. A live attempt
 * (the current attempt of a scheduled or running job) lives in `attempts`
 * (by job id) from placement until the job reaches a final state; its ranks
 * point at their agents and hold their devices until then. When it fails
 * with restarts left (recovery, docs/coordinator.md), it stays there marked
 * `failed` while its job is recovering: its ranks' messages are refused, it
 * keeps its devices until its restart is due, and the next attempt replaces
 * it in `attempts` when placed.
 *
 * Writes and sends (fabric.c): fabric_tx() opens the iteration's lazy
 * transaction, fabric_wrote() notes each write's outcome, fabric_send_to()
 * holds a message until that transaction commits (fabric_flush).
 */
#ifndef RINGMASTER_COORDINATORD_FABRIC_INT_H
#define RINGMASTER_COORDINATORD_FABRIC_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "curve.h"
#include "fabric.h"
#include "jobspec.h"
#include "smap.h"
#include "store.h"
#include "wire.h"

typedef struct attempt attempt_t;

#define KIND_CPU 0
#define KIND_CUDA 1
#define N_KINDS 2
#define MAX_DEVICES 4096
#define MAX_BATCH 512              /* wire messages per fabric_handle_wire */
#define EXPIRY_CHECK_US 100000     /* how often agents' silence is checked */
#define DEAF_FORGIVEN_MAX_US 60000000 /* coordinator stalls forgiven an agent between its messages */
#define SCHED_PERIOD_US 1000000    /* scheduling pass even without a change */
#define KV_MAX_KEY_BYTES 4096
#define KV_MAX_KEYS 65536
#define KV_MAX_BYTES (64u << 20)   /* keys + values of one attempt */
#define KV_MAX_PARKED 65536
#define KV_MAX_TIMEOUT_MS 86400000 /* one day */
#define REASON_BYTES 2048
#define SNAP_MAX_FILE_BYTES 255     /* a shard's file name */
#define SNAP_MAX_PATH_BYTES 4096    /* a committed folder's path */
#define SNAP_MAX_DELETED 65536      /* steps in one SNAPSHOT_COMMITTED's deleted list */
#define SNAP_MAX_UNCONFIRMED 8      /* SNAPSHOT_COMMITs awaiting rank 0's answer, per attempt */
/* A rank's DONE and its agent's RANK_EXITED travel on different connections:
 * a clean exit (status 0) before DONE fails the job only if DONE has not
 * come this long after it. */
#define CLEAN_EXIT_GRACE_US 2000000
/* A rank's FAILED and its agent's RANK_EXITED (with the exit status that
 * tells whether a retry can help) travel on different connections too: a
 * FAILED without exit_code waits this long for the status. */
#define FAILED_EXIT_GRACE_US 2000000

/* What an attempt placed by a restart reports in its `recovered` event. */
typedef struct {
	char cause[REASON_BYTES];
	int failed_attempt;
	int64_t failed_mono_us;  /* the failure handled */
	int64_t detection_us;    /* the failure -> the coordinator heard of it */
	int64_t spawned_mono_us; /* SPAWNs of the new attempt sent */
	int64_t joined0_mono_us; /* its rank 0 joined (0: not yet) */
	bool has_resume;
	int64_t resume_step;     /* the snapshot offered in rank 0's JOINED */
} recovery_t;

typedef struct {
	int kind;
	int index;
	attempt_t *owner; /* NULL when free */
} device_t;

typedef struct {
	char node[WIRE_MAX_IDENTITY_BYTES + 1];
	char ident[WIRE_MAX_IDENTITY_BYTES + 1]; /* "agent/<node>" */
	device_t *devices; /* sorted by (kind, index) */
	int n_devices;
	bool alive;
	bool hb_dirty;     /* last_seen_wall_us not yet written to the store */
	unsigned mark;     /* scratch for "each agent once" walks */
	int64_t last_seen_mono_us;
	int64_t last_seen_wall_us;
	int64_t forgiven_us; /* coordinator stalls added to last_seen_mono_us since it last spoke */
	int64_t memory_bytes; /* host memory it offers ranks (REGISTER); 0: unknown, not limited */
	int64_t key_id;    /* its CURVE key (--broker-auth on; 0: none yet) */
	char *ckpt_root;   /* REGISTER's checkpoint_root (malloc'ed; NULL: none) */
	bool programs;     /* REGISTER's programs: it runs program jobs (program.c) */
	int port_lo, port_hi; /* REGISTER's program_ports */
	char advertise[256];  /* REGISTER's advertise ("" when none): a program's MASTER_ADDR */
} agent_t;

typedef struct {
	agent_t *agent;
	int device_kind;
	int device_index;
	bool connected; /* it has sent a message: it can be told to ABORT */
	bool joined, done, exited;
	bool rejoin;    /* failed attempt: asked to park and rejoin the next one in its process */
	bool parked;    /* ... and it answered PARKED */
	int adopted_from; /* a survivor of that attempt kept as this rank (0: a new process) */
	bool reported;  /* scratch for REGISTER reconciliation */
	int64_t clean_exit_deadline_us; /* exited with status 0 before DONE: wait for it until then */
	int64_t failed_deadline_us;     /* sent FAILED without exit_code: wait for its exit status until then */
	char *failed_reason;            /* that FAILED's reason (malloc'ed) */
	bool has_memory; /* memory as last written to the store (rewritten only when it changes) */
	store_rank_memory_t memory;
} rank_rt_t;

/* One rank's SNAPSHOT_WRITTEN for the snapshot in flight. */
typedef struct {
	bool reported;
	int64_t bytes;
	char xxh3[17];
	char file[SNAP_MAX_FILE_BYTES + 1];
} shard_t;

typedef struct parked {
	struct parked *next;
	int rank;
	char *key;
	int64_t deadline_mono_us;
} parked_t;

struct attempt {
	char job_id[STORE_ID_BYTES];
	int attempt;
	int world_size;
	int kind;
	store_job_state_t state; /* scheduled or running */
	jobspec_t spec;          /* the stored spec, parsed once (restarts, retention, resume_from) */
	json_t *spec_json;       /* the stored spec as JSON, sent in JOINED */
	rank_rt_t *ranks;        /* world_size entries */
	int n_joined, n_done;
	smap_t kv;               /* key -> malloc'ed value */
	size_t kv_bytes;
	parked_t *parked;
	int n_parked;
	/* snapshots (the protocol is in wire.h): the set of reports being
	 * gathered (one step at a time), the last complete set (its
	 * SNAPSHOT_COMMIT is sent again on a repeated report), and the steps
	 * sent to rank 0 in a SNAPSHOT_COMMIT that it has not confirmed yet */
	shard_t *shards;         /* world_size entries, allocated at the first report */
	shard_t *sent_shards;    /* world_size entries: the last complete set */
	bool gathering;
	int64_t gather_step;
	int n_gathered;
	bool has_sent;
	int64_t sent_step;       /* the step of sent_shards */
	int64_t unconfirmed[SNAP_MAX_UNCONFIRMED];
	int n_unconfirmed;
	/* metrics rows: the highest step stored for this attempt (-1: not read
	 * from the store yet, after a coordinator restart), and the from_step of
	 * the last METRICS_RESEND sent (0: none) */
	int64_t last_metric_step;
	int64_t resend_from;
	bool has_failed_snap;    /* a SNAPSHOT_FAILED was recorded as an event, for failed_snap_step */
	int64_t failed_snap_step;
	bool has_committed;      /* committed_step was recorded by this attempt */
	int64_t committed_step;  /* the highest it recorded */
	/* recovery (docs/coordinator.md "Recovery"): the job's restarts so far
	 * and its spec's limit; once the attempt has failed with restarts left,
	 * `failed` is set (its ranks are being stopped, their messages refused),
	 * then `drained` when every rank is gone or the grace is over, then it
	 * is replaced by the next attempt at restart_at_us (devices permitting);
	 * `released` once its devices were given back for that placement */
	int restarts, max_restarts;
	bool failed, drained, released;
	char *cause;             /* malloc'ed: why it failed */
	int64_t failed_mono_us;  /* when the coordinator handled the failure */
	int64_t detection_us;    /* from the failure to the coordinator hearing of it */
	int64_t drain_deadline_us, restart_at_us;
	recovery_t *rec;         /* attempts placed by a restart, until rank 0's first METRICS */
	/* a program job (program.c): its ranks' RANK_STARTED count as `joined`,
	 * their exit 0 as `done`; master_port is its reserved MASTER_PORT on
	 * rank 0's node (0: unknown, after a coordinator restart) */
	bool program;
	int master_port;
};

/* A message held until the transaction of its iteration is committed. */
typedef struct outmsg {
	struct outmsg *next;
	wire_type_t type;
	json_t *payload;
	char ident[WIRE_MAX_IDENTITY_BYTES + 1];
	size_t ident_len;
} outmsg_t;

/* A queued job's spec, parsed once when the scheduler first sees the job
 * and kept until the job is placed or leaves the queue. */
typedef struct {
	jobspec_t spec;
	json_t *json;
	bool ok;       /* the stored spec parsed */
	unsigned mark; /* the scheduling pass that last saw the job queued */
} queued_spec_t;

struct fabric {
	void *router;
	store_t *st;
	fabric_options_t opt;
	int64_t dead_after_us;
	smap_t agents;   /* node -> agent_t* */
	smap_t attempts; /* job id -> attempt_t* */
	smap_t queued;   /* job id -> queued_spec_t*: specs of queued jobs */
	unsigned sched_gen;
	bool in_tx;
	bool tx_failed;
	int n_tx_writes;
	bool sched_dirty;
	unsigned mark_gen;
	int64_t next_hb_us, next_expiry_us, next_sched_us;
	int64_t next_prune_us;         /* scheduler.c: the next pruning of dead worker rows */
	outmsg_t *out_head, *out_tail; /* sent after the commit, in order */
	curve_peer_t peer; /* the authenticated sender of the message handled now */
};

/* ---- fabric.c: the transaction, sending, names ---- */

/* Open the iteration's transaction if none is open; false when it cannot
 * be (logged): the caller then skips its writes. */
bool fabric_tx(fabric_t *f);

/* Note the outcome `r` of one write (`what`, for the log) in the open
 * transaction; a failure other than -ENOENT rolls it back at the flush. */
void fabric_wrote(fabric_t *f, int r, const char *what);

/* Send `payload` (a new reference, consumed; NULL means out of memory) to
 * the peer `ident` (`ident_len` bytes): at once, or after the commit when a
 * transaction is open, keeping the order of everything sent. */
void fabric_send_raw(fabric_t *f, const void *ident, size_t ident_len, wire_type_t type, json_t *payload);

/* fabric_send_raw to a text identity. */
void fabric_send_to(fabric_t *f, const char *ident, wire_type_t type, json_t *payload);

/* ERROR {code, detail} to `ident`. */
void fabric_send_error(fabric_t *f, const void *ident, size_t ident_len, int code, const char *detail);

/* "rank/<job>/<attempt>/<rank>" into `out`. */
void fabric_rank_ident(char out[WIRE_MAX_IDENTITY_BYTES + 1], const char *job, int attempt, int rank);

/* KIND_CPU / KIND_CUDA for "cpu" / "cuda", -1 for anything else (NULL too). */
int fabric_kind_parse(const char *name);

/* "cpu" / "cuda" for a kind ("?" out of range). */
const char *fabric_kind_name(int kind);

/* Append printf-style text to `buf` (REASON_BYTES, `*len` used so far),
 * cut with "..." at the end when full. */
void fabric_reason_add(char *buf, size_t *len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
