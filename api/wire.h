/*
 * wire: the ZeroMQ protocol between ringmasterd and the workers (agents and
 * rank processes), and its codec.
 *
 * The coordinator binds one ROUTER socket; every agent and every rank connects
 * one DEALER socket with a routing identity:
 *   agent/<node>                       a node agent
 *   rank/<job>/<attempt>/<rank>        a rank process
 * A message is three frames after the identity that the ROUTER adds:
 *   [protocol "RMW1"] [type, ASCII, e.g. "HEARTBEAT"] [payload: one JSON object]
 * The payload is at most WIRE_MAX_PAYLOAD_BYTES. wire_decode() checks the
 * protocol, the type and the fields each type requires (listed below with
 * their JSON types; "uint" is an integer >= 0, "hex16" a string of 16
 * lowercase hex digits), and the optional ones when present; extra fields
 * are ignored so that newer peers can add some. Anything it refuses gets an ERROR reply (or is dropped when no reply
 * is possible); a peer never crashes on what it receives.
 *
 * Liveness (Paranoid Pirate): any message from a peer counts as a heartbeat.
 * Agents send HEARTBEAT every heartbeat_ms when they have nothing else to
 * say; the coordinator declares an agent dead after `dead_after` intervals
 * without a message. The coordinator sends each registered agent HEARTBEAT
 * {node: the agent's node} every heartbeat_ms too; an agent that hears
 * nothing for dead_after intervals reconnects (backoff 1 s doubling to 32 s)
 * and REGISTERs again with the ranks it runs. Rank processes are watched by their agent (waitpid),
 * so they need no heartbeat of their own.
 *
 * Messages and their required payload fields:
 *
 * agent -> coordinator
 *   REGISTER     node:str, devices:[{kind:"cpu"|"cuda", index:int}],
 *                ranks:[{job:str, attempt:int, rank:int, pid:int}]  (ranks it runs now);
 *                optional memory_bytes:uint (host memory it offers its ranks: the
 *                coordinator's memory fit; absent or 0: unknown, not limited)
 *                optional checkpoint_root:str (the agent's --checkpoint-root:
 *                the coordinator derives a committed snapshot's folder from
 *                it, <root>/<job>/step-<NNNNNNNN>, never from a message)
 *                optional advertise:str (the address its ranks listen on;
 *                a program job's MASTER_ADDR when rank 0 is there)
 *                optional programs:bool (the agent was started with at least
 *                one --allow-program: the coordinator places program jobs
 *                only on agents that say true)
 *                optional program_ports:[lo:int, hi:int] (the agent's
 *                --program-ports LO-HI, 1024 <= lo <= hi <= 65535; absent:
 *                29500-29999): where the coordinator picks MASTER_PORT
 *   ENROLL       node:str, token:str (a join token, rmj_...): sent once, on
 *                the identity enroll/<node>, by an agent whose CURVE key is not
 *                enrolled yet (docs/workers.md); answered ENROLLED or ERROR
 *                (403: token unknown, used or expired; 409: the node is
 *                another key's)
 *   HEARTBEAT    node:str
 *   RANK_EXITED  job:str, attempt:int, rank:int,
 *                exit_code:int (-1 when killed by a signal), signal:int (0 when exited),
 *                error:str (the rank's last line on stderr that says "error", or "");
 *                optional exited_at_us:uint (the agent's wall clock at waitpid, Unix
 *                microseconds: the coordinator reports how long the news took);
 *                optional failure:uint (an rm_failure_t of api/exitcode.h, what
 *                the status means; without it the coordinator derives it from
 *                exit_code and signal with rm_exit_failure). For a program
 *                rank: status 0 is the rank's success; anything else fails
 *                the attempt (no status or failure code is final: every
 *                failure is retried while restarts are left)
 *   RANK_STARTED job:str, attempt:int, rank:int, pid:int
 *                a program rank's process was started (program ranks never
 *                JOIN); the attempt is running once every rank sent it
 *   PROGRAM_METRICS job:str, attempt:int, rank:int,
 *                row:{step:int >= 0, loss:real, optional val_loss, lr,
 *                grad_norm, tokens_per_s, ms, mfu: reals}
 *                one JSON line a program rank wrote to RINGMASTER_METRICS_FD,
 *                checked and forwarded by its agent (bad lines dropped, at
 *                most 100 lines/s per rank); rank 0's rows are stored as
 *                METRICS rows (absent reals stored as 0), other ranks' rows
 *                are ignored
 *   RANK_EXITED, RANK_STARTED, PROGRAM_METRICS and LOGS are accepted only
 *   from the agent the rank was placed on (else ERROR 403)
 * coordinator -> agent
 *   ENROLLED     key_id:uint, node:str: the sender's public key is enrolled
 *                for node; it reconnects and REGISTERs with that key
 *   REGISTERED   heartbeat_ms:int, dead_after:int
 *   SPAWN        job:str, attempt:int, rank:int, world_size:int,
 *                device:{kind:str, index:int}   (the agent picks the rank's
 *                thread count and CPU affinity for the node);
 *                optional adopt:int, a failed attempt: when rank `rank` of
 *                that attempt still runs on this device (it PARKED), it
 *                becomes this attempt's rank in its process instead of a
 *                new one being spawned (never for a program job);
 *                for a program job (the spec's "program"), also
 *                program:{argv:[str], cwd:str|null, env:{str:str}} (the
 *                spec's program) and
 *                torch:{master_addr:str, master_port:int, local_rank:int,
 *                local_world_size:int, group_rank:int, group_world_size:int
 *                (the job's nodes), restart_count:int,
 *                max_restarts:int, run_id:str}: torchrun's values for this
 *                rank. master_addr is REGISTER's advertise of rank 0's
 *                agent ("127.0.0.1" when it sent none), master_port a
 *                port of rank 0's node's program_ports that no other live
 *                attempt on that node holds (a new one per attempt),
 *                group_rank the node's index among the job's nodes in rank
 *                order, local_rank / local_world_size the rank's position
 *                among / the count of the job's ranks on its node,
 *                restart_count the restarts so far (0 first), run_id the
 *                job id. The agent runs argv with torchrun's environment
 *                (docs/workers.md);
 *                optional env:{str:str} (issue 25), the spec's top-level
 *                env, for every job (absent when the spec has none): the
 *                agent sets it in the rank's process over its own --env
 *                defaults, under the variables it sets itself (a
 *                program's program.env goes on top of it)
 *   KILL         job:str, attempt:int, rank:int (-1: every rank of that job)
 *
 * rank -> coordinator  (the identity names job, attempt and rank)
 *   JOIN         job:str, attempt:int, rank:int
 *   KV_SET       key:str, value:str (base64; the coordinator keeps it opaque)
 *   KV_GET       key:str, timeout_ms:int (0: answer now; else wait up to that)
 *   METRICS      step:int, then the training row, the memory figures, or both:
 *                  row:    loss:real, lr:real, grad_norm:real, tokens_per_s:real,
 *                          ms:real; optional val_loss:real
 *                  memory: params_bytes:uint, grads_bytes:uint, optim_bytes:uint,
 *                          activations_bytes:uint (what this rank holds, constant
 *                          over an attempt)
 *                each set all or none, at least one set. Rank 0 sends row +
 *                memory every metrics_every steps (its loss is the mean over
 *                ranks: its rows are the job's). Every other rank sends ONE
 *                memory-only METRICS {step, params_bytes, grads_bytes,
 *                optim_bytes, activations_bytes} at its first step. The
 *                coordinator stores rank 0's rows as metrics, and every rank's
 *                memory on its row of the attempt's ranks; a row sent by a rank
 *                other than 0 is not stored (its memory is).
 *                Optional, from rank 0 (its first METRICS of an attempt ends a
 *                recovery: the coordinator's `recovered` event reports them):
 *                  resumed_from_step:uint (the snapshot step it loaded; 0: it
 *                  started fresh), load_ms:real >= 0 (loading that snapshot),
 *                  rendezvous_ms:real >= 0 (from its JOINED to its communicator
 *                  being ready), snapshot_skipped:str (the newer snapshots it
 *                  passed over as corrupt or unreadable, and why; the
 *                  coordinator records a `snapshot_skipped` event)
 *                Optional on rank 0's rows: prev_step:uint, the step of its
 *                previous row in this attempt (0: none). A row whose prev_step
 *                is past the last row the coordinator stored shows rows lost
 *                (sent while the coordinator was down, or in its buffers when
 *                it died): the coordinator answers METRICS_RESEND.
 *   DONE         step:int, loss:real
 *   FAILED       reason:str; optional exit_code:int (the status the rank exits
 *                with), optional failure:uint (an rm_failure_t of api/exitcode.h):
 *                they tell the coordinator whether a restart can help (the
 *                failure code first, else the exit status); with neither the
 *                coordinator waits up to 2 s for the agent's RANK_EXITED
 *   SNAPSHOT_WRITTEN    step:uint, file:str, bytes:uint, xxh3:hex16
 *                this rank's shard of `step` (`file`, a plain file name such as
 *                "rank-1-of-4.safetensors", `bytes` long, XXH3-64 `xxh3`) is
 *                written and fsync'ed under <checkpoint dir>/step-<NNNNNNNN>.tmp/
 *   SNAPSHOT_FAILED  step:uint, error:str (one line: "write rank-1-of-2.safetensors: No
 *                space left on device"), optional failure:uint (an rm_failure_t,
 *                RM_FAILURE_IO from this worker): this rank's shard of `step` could not be
 *                written; that snapshot never commits, the previous one stays latest
 *   SNAPSHOT_COMMITTED  step:uint, bytes:uint (all files), path:str (the committed
 *                folder), deleted:[uint] (steps retention removed; may be [])
 *                rank 0 only, after SNAPSHOT_COMMIT: the manifest is written and
 *                step-N.tmp renamed to step-N and fsync'ed
 *   PARKED       step:uint (the last step it completed; 0: none)
 *                the answer to an ABORT with rejoin: true, at once: the rank
 *                stops training at the end of its step, drops its
 *                communicator and training state and waits in its process
 *                for REJOIN (see Recovery below)
 *   TRACE        step:uint, start_unix_us:uint, dur_us:real >= 0,
 *                events:[{name:str, ts_us:real, dur_us:real}]
 *                the phases of one step inside the spec's profile range, from
 *                every rank: the step started at start_unix_us (the rank's
 *                wall clock, Unix microseconds: ranks line up on one
 *                timeline) and lasted dur_us; each phase starts ts_us after
 *                it. The coordinator checks the events (at most 64, names 1
 *                to 64 bytes, numbers finite and >= 0) and stores them for
 *                GET /v1/jobs/{id}/trace (a Chrome trace)
 * coordinator -> rank
 *   JOINED       job:str, attempt:int, rank:int, world_size:int,
 *                spec:{...} (the job spec with defaults), metrics_every:int,
 *                resume: {step:uint, path:str (non-empty)} | null: the job's
 *                latest committed, not deleted snapshot (the folder to load),
 *                else the checkpoint its spec's resume_from names, else null;
 *                sent for every attempt, the first included
 *   KV_OK        key:str
 *   KV_VALUE     key:str, found:bool, value:str ("" when not found)
 *   ABORT        job:str, attempt:int, reason:str; optional rejoin:bool.
 *                Without rejoin (or false) the rank exits at once. When the
 *                attempt failed and the job is being restarted, the reason
 *                starts with "recovering: " and names the cause; with
 *                rejoin: true the rank answers PARKED, drops its
 *                communicator and waits for REJOIN instead of exiting
 *   REJOIN       job:str, attempt:int (the new attempt)
 *                to a PARKED rank, on its old identity: it is rank `rank` of
 *                `attempt` now, on the same device; once its training has
 *                stopped it reconnects as rank/<job>/<attempt>/<rank> and
 *                JOINs. Its late messages on the old identity are dropped
 *   SNAPSHOT_COMMIT  job:str, attempt:int, step:uint,
 *                files:[{rank:int, file:str, bytes:uint, xxh3:hex16}] (by rank)
 *                to rank 0 only, once every rank of the attempt has reported
 *                SNAPSHOT_WRITTEN for `step`
 *   METRICS_RESEND  from_step:uint, to_step:uint
 *                to rank 0: its rows of steps from_step..to_step did not
 *                reach the store; send them again (the rank keeps the rows it
 *                sent)
 *
 * either way
 *   ERROR        code:int (400 malformed, 404 unknown type or job, 409 stale
 *                attempt, 413 too large), detail:str
 *
 * KV keys live per (job, attempt): the coordinator scopes them by the
 * sender's identity, so ranks of different attempts never see each other's
 * keys.
 *
 * Snapshot commit (DESIGN.md "Snapshots"): each rank writes its shard of
 * step N to step-N.tmp/, fsyncs it and sends SNAPSHOT_WRITTEN. The
 * coordinator keeps the reports of the live attempt in memory; when every
 * rank has reported N it sends SNAPSHOT_COMMIT (the files in rank order) to
 * rank 0, which writes the manifest, renames step-N.tmp to step-N, fsyncs
 * the folder and answers SNAPSHOT_COMMITTED. Only then is the checkpoint
 * recorded (durably) as committed, with a "checkpoint" event, and the steps
 * in `deleted` marked deleted. Rules:
 *   - reports are gathered for one step at a time per attempt: a
 *     SNAPSHOT_WRITTEN for a newer step drops the gathered reports of the
 *     older one (a torn snapshot never becomes committed); a report for an
 *     older step, or for a step already committed, is ignored;
 *   - a repeated report (same rank, same step) is idempotent; once the set is
 *     complete it gives rank 0 the same SNAPSHOT_COMMIT again (until rank 0
 *     confirms). The same rank reporting another file, size or checksum for
 *     the step gets ERROR 409;
 *   - SNAPSHOT_COMMITTED is accepted from rank 0 for any step sent to it in
 *     a SNAPSHOT_COMMIT and not yet confirmed (up to 8, so rank 0 may still
 *     be committing step N when the set of step N+k completes); a repeat for
 *     the latest committed step is a no-op; anything else gets ERROR 409 (and
 *     from another rank ERROR 400);
 *   - SNAPSHOT_FAILED for `step` drops the reports gathered for it and
 *     makes later reports of it (and of older steps) ignored; the job gets
 *     one `snapshot_failed` event per step;
 *   - reports from a stale attempt (or a job with no live attempt) get
 *     ERROR 409 and are dropped; gathered reports die with their attempt
 *     (and with the coordinator process): only committed checkpoints are
 *     durable.
 *
 * Recovery (docs/coordinator.md "Recovery"): when a rank of a live attempt
 * fails (RANK_EXITED with a signal or a status other than 0; FAILED;
 * its agent declared dead), the failure is retryable (rm_failure_retryable
 * of api/exitcode.h: not a spec, data or divergence error) and the job has
 * restarts left, the attempt is
 * stale from then on (snapshot reports get ERROR 409). Its surviving ranks
 * (connected, agent alive, not exited) get ABORT {rejoin: true}: each answers
 * PARKED at once and drops its communicator and training state at the end
 * of its step; their other
 * messages are answered with the same ABORT. Ranks on dead agents get a plain
 * ABORT; ranks that never connected are KILLed. Once every rank is gone or
 * parked (a rank neither by the grace is KILLed and not kept), the next
 * attempt (attempt + 1) is placed: a parked rank placed again on its own
 * device and rank number is adopted (SPAWN adopt) and told REJOIN on its old
 * identity, then JOINs the new attempt; the other parked ranks get a plain
 * ABORT and KILL, and new processes are SPAWNed for the rest. Every JOINED
 * carries `resume`.
 */
#ifndef RINGMASTER_API_WIRE_H
#define RINGMASTER_API_WIRE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#define WIRE_PROTOCOL "RMW1"
#define WIRE_MAX_PAYLOAD_BYTES (1 << 20)
#define WIRE_MAX_IDENTITY_BYTES 255

typedef enum {
	WIRE_REGISTER = 1,
	WIRE_HEARTBEAT,
	WIRE_RANK_EXITED,
	WIRE_REGISTERED,
	WIRE_SPAWN,
	WIRE_KILL,
	WIRE_JOIN,
	WIRE_KV_SET,
	WIRE_KV_GET,
	WIRE_METRICS,
	WIRE_DONE,
	WIRE_FAILED,
	WIRE_JOINED,
	WIRE_KV_OK,
	WIRE_KV_VALUE,
	WIRE_ABORT,
	WIRE_ERROR,
	WIRE_SNAPSHOT_WRITTEN,
	WIRE_SNAPSHOT_COMMIT,
	WIRE_SNAPSHOT_COMMITTED,
	WIRE_METRICS_RESEND,
	WIRE_PARKED,
	WIRE_REJOIN,
	WIRE_TRACE,
	WIRE_SNAPSHOT_FAILED,
	WIRE_LOGS,
	WIRE_ENROLL,
	WIRE_ENROLLED,
	WIRE_RANK_STARTED,
	WIRE_PROGRAM_METRICS,
} wire_type_t;

#define WIRE_N_TYPES 30 /* the highest wire_type_t */

/* "REGISTER", ... for a valid type; "?" otherwise. */
const char *wire_type_name(wire_type_t type);

/* The type named by `name` (`len` bytes, not NUL-terminated): 0 and
 * *ret_type, or -ENOENT. */
int wire_type_from_name(const char *name, size_t len, wire_type_t *ret_type);

/*
 * Decode one message: `n_frames` frames (data, size) after any routing
 * identity. On success returns 0, *ret_type and *ret_payload (a new
 * reference to a JSON object with every field its type requires). On
 * failure returns a negative code with one line in `err`:
 *   -EPROTO   wrong frame count or protocol frame (a wrong version)
 *   -ENOENT   unknown message type
 *   -EMSGSIZE payload over WIRE_MAX_PAYLOAD_BYTES
 *   -EINVAL   payload not a JSON object, or a required field missing or of
 *             the wrong type (`err` names the field)
 * The ERROR reply's code for each: 400, 404, 413, 400.
 */
int wire_decode(size_t n_frames, const void *const *frames, const size_t *sizes,
                wire_type_t *ret_type, json_t **ret_payload, char *err, size_t errlen);

/* The ERROR code (400, 404, 413) for a wire_decode() failure. */
int wire_error_code(int decode_rc);

/*
 * Encode `payload` (borrowed; must be an object with the fields `type`
 * requires) compactly into a malloc'ed buffer: 0 and *ret_buf / *ret_len, or
 * -EINVAL (fields missing) / -EMSGSIZE / -ENOMEM with `err` set.
 */
int wire_encode(wire_type_t type, const json_t *payload, char **ret_buf, size_t *ret_len,
                char *err, size_t errlen);

/*
 * Send one message on a ZeroMQ socket: [identity] [RMW1] [type] [payload].
 * `identity` is NULL on a DEALER; on a ROUTER it names the peer. The send
 * never blocks (ZMQ_DONTWAIT): a peer that cannot take it loses it.
 * 0 or a negative errno (-EINVAL for a payload wire_encode refuses).
 */
int wire_send(void *sock, const void *identity, size_t identity_len, wire_type_t type,
              const json_t *payload);

/*
 * Receive one whole message from `sock` (a DEALER when `ret_identity` is NULL,
 * else a ROUTER: the identity is copied there, at most
 * WIRE_MAX_IDENTITY_BYTES, and its length stored in *ret_identity_len) and
 * decode it. `flags` is 0 or ZMQ_DONTWAIT. Returns 0 with *ret_type and
 * *ret_payload; -EAGAIN when nothing is waiting (ZMQ_DONTWAIT) or on a
 * receive timeout; a wire_decode() error (the whole message has been consumed,
 * the identity is set, and `err` says why) for the caller to answer with
 * ERROR; or another negative errno when the socket failed.
 */
int wire_recv(void *sock, int flags, unsigned char *ret_identity, size_t *ret_identity_len,
              wire_type_t *ret_type, json_t **ret_payload, char *err, size_t errlen);

/*
 * wire_recv, and on a CURVE server also the connection's authenticated
 * User-Id (zmq_msg_gets "User-Id", set by the ZAP handler) into
 * `ret_user_id` (`user_id_len` bytes, "" when there is none), whenever the
 * identity is set.
 */
int wire_recv_peer(void *sock, int flags, unsigned char *ret_identity, size_t *ret_identity_len,
                   char *ret_user_id, size_t user_id_len, wire_type_t *ret_type, json_t **ret_payload,
                   char *err, size_t errlen);

/* Send ERROR {code, detail} to `identity` (NULL on a DEALER). 0 or -errno. */
int wire_send_error(void *sock, const void *identity, size_t identity_len, int code,
                    const char *detail);

#endif
