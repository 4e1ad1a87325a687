/*
 * trace: the phases of one training step (data, forward, backward, gradient
 * reduction, optimizer, snapshot copy, evaluation, ...) as a profiler sees
 * them.
 *
 * train.c brackets each phase with trace_begin / trace_end. Two things can
 * come of it:
 *   - NVTX ranges (nvtxRangePushA / nvtxRangePop), one per phase inside one
 *     per step, at every step: Nsight Systems (`nsys profile`) shows them
 *     on the training thread's timeline. They exist in builds with CUDA
 *     (meson defines RINGMASTER_NVTX; NVTX v3 is header-only and costs
 *     nothing when no profiler is attached); a CPU-only build compiles them
 *     out.
 *   - Collected events: for a step begun with `collect` set (the steps of
 *     the job spec's `profile` range), each phase's start and duration on
 *     CLOCK_MONOTONIC, relative to the step's start, plus the step's start
 *     on the wall clock (so that ranks can be laid on one timeline) and its
 *     duration. train.c hands them to train_options_t.on_trace; rank.c sends
 *     them to the coordinator (wire TRACE), which serves them as a Chrome
 *     trace (docs/profiling.md).
 * Tracing only reads clocks: it never changes a computed bit.
 *
 * A trace_t belongs to one thread (the training thread); phases do not nest
 * (trace_begin while a phase is open ends that phase first).
 */
#ifndef RINGMASTER_WORKER_TRACE_H
#define RINGMASTER_WORKER_TRACE_H

#include <stdbool.h>
#include <stdint.h>

/* The phases of a step, in the order they usually run. */
typedef enum {
	TRACE_ZERO_GRAD = 0, /* zeroing the gradients before the first micro-batch */
	TRACE_DATA,          /* loading one micro-batch */
	TRACE_FORWARD,       /* one micro-batch's forward pass and loss */
	TRACE_BACKWARD,      /* one micro-batch's backward pass */
	TRACE_GRAD_REDUCE,   /* all-reduce / reduce-scatter of the gradients and the loss,
	                      * or the wait for ZeRO's communication thread */
	TRACE_CLIP,          /* the global gradient norm (an all-gather when sharded) and clipping */
	TRACE_OPTIMIZER,     /* AdamW on this rank's range */
	TRACE_PARAM_GATHER,  /* sharded: all-gather of the updated parameters */
	TRACE_EVAL,          /* a validation pass */
	TRACE_SNAPSHOT,      /* copying the state aside for the snapshot writer */
	TRACE_N_PHASES
} trace_phase_t;

/* At most this many events per step. Micro-batch phases (data, forward,
 * backward) past TRACE_MAX_EVENTS - TRACE_N_PHASES events are merged into
 * one "micro_batches" event (grad_accum > 17), so that the phases after
 * them always fit. The coordinator refuses a TRACE with more. */
#define TRACE_MAX_EVENTS 64
/* The name of that merged event. */
#define TRACE_MERGED_NAME "micro_batches"

/* One phase of a step: name (static storage), start from the step's start
 * and duration, in microseconds. */
typedef struct {
	const char *name;
	double ts_us;
	double dur_us;
} trace_event_t;

/* A collected step, as on_trace gets it (borrowed, valid during the call). */
typedef struct {
	int64_t step;
	int64_t start_unix_us; /* the step's start on the wall clock (Unix microseconds) */
	double dur_us;         /* from its start to the end of its last phase */
	const trace_event_t *events;
	int n_events; /* in start order; they do not overlap */
} trace_step_t;

typedef struct {
	bool collect;  /* this step's events are being collected */
	bool in_step;
	int open;      /* the open phase, or -1 */
	int64_t step;
	int64_t step_start_ns;   /* CLOCK_MONOTONIC */
	int64_t step_start_unix_us;
	int64_t open_start_ns;
	double dur_us;           /* set by trace_step_end */
	int merged;              /* index of the micro_batches event, or -1 */
	int n_events;
	trace_event_t events[TRACE_MAX_EVENTS];
} trace_t;

/* "zero_grad", "data", ... ; "?" for an out-of-range value. */
const char *trace_phase_name(trace_phase_t phase);

/* Ready for trace_step_begin (nothing allocated: a trace_t needs no free). */
void trace_init(trace_t *t);

/* Start step `step`: an NVTX range "step N" (CUDA builds), and with
 * `collect` the step's clocks and an empty event list. A step still open is
 * ended first. */
void trace_step_begin(trace_t *t, int64_t step, bool collect);

/* Start / end a phase of the current step (NVTX push / pop; with collect,
 * its times). trace_end of a phase that is not open does nothing, so a
 * phase cut short by an error need not be closed. Outside a step, only the
 * NVTX range. */
void trace_begin(trace_t *t, trace_phase_t phase);
void trace_end(trace_t *t, trace_phase_t phase);

/* End the current step (an open phase is ended first; the step's NVTX range
 * popped). With collect, fills *ret_step (borrowing t's events, valid until
 * the next trace_step_begin) and returns true; otherwise returns false and
 * leaves *ret_step alone. */
bool trace_step_end(trace_t *t, trace_step_t *ret_step);

#endif
