/*
 * trace: per-step phase timing and NVTX ranges (see trace.h).
 *
 * The NVTX part is compiled in when meson defines RINGMASTER_NVTX (builds
 * with CUDA): NVTX v3 is header-only and its calls are no-ops until a tool
 * such as Nsight Systems injects itself, so the ranges are emitted at every
 * step. Without it, the same module times the phases and nothing else.
 */
#include "trace.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef RINGMASTER_NVTX
#include <nvtx3/nvToolsExt.h>
#define NVTX_PUSH(name) nvtxRangePushA(name)
#define NVTX_POP() nvtxRangePop()
#else
#define NVTX_PUSH(name) ((void)(name))
#define NVTX_POP() ((void)0)
#endif

static const char *const s_phase_names[TRACE_N_PHASES] = {
	[TRACE_ZERO_GRAD] = "zero_grad",
	[TRACE_DATA] = "data",
	[TRACE_FORWARD] = "forward",
	[TRACE_BACKWARD] = "backward",
	[TRACE_GRAD_REDUCE] = "grad_reduce",
	[TRACE_CLIP] = "clip",
	[TRACE_OPTIMIZER] = "optimizer",
	[TRACE_PARAM_GATHER] = "param_gather",
	[TRACE_EVAL] = "eval",
	[TRACE_SNAPSHOT] = "snapshot",
};

const char *trace_phase_name(trace_phase_t phase)
{
	return (unsigned)phase < TRACE_N_PHASES ? s_phase_names[phase] : "?";
}

static int64_t s_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Microseconds of t's step at monotonic time `ns`. */
static double s_rel_us(const trace_t *t, int64_t ns)
{
	return (double)(ns - t->step_start_ns) / 1e3;
}

static bool s_micro(int phase)
{
	return phase == TRACE_DATA || phase == TRACE_FORWARD || phase == TRACE_BACKWARD;
}

void trace_init(trace_t *t)
{
	memset(t, 0, sizeof *t);
	t->open = -1;
	t->merged = -1;
}

/* Record the open phase as ended at `end_ns`. */
static void s_record(trace_t *t, int phase, int64_t end_ns)
{
	double ts = s_rel_us(t, t->open_start_ns), dur = (double)(end_ns - t->open_start_ns) / 1e3;
	if (s_micro(phase) && t->n_events >= TRACE_MAX_EVENTS - TRACE_N_PHASES) {
		/* past the micro-batch budget: one event from the first merged
		 * phase's start to the last one's end */
		if (t->merged >= 0 && t->merged == t->n_events - 1) {
			trace_event_t *e = &t->events[t->merged];
			e->dur_us = ts + dur - e->ts_us;
			return;
		}
		if (t->n_events == TRACE_MAX_EVENTS)
			return;
		t->merged = t->n_events;
		t->events[t->n_events++] = (trace_event_t){TRACE_MERGED_NAME, ts, dur};
		return;
	}
	if (t->n_events == TRACE_MAX_EVENTS)
		return; /* cannot happen with one event per non-micro phase; kept safe */
	t->events[t->n_events++] = (trace_event_t){s_phase_names[phase], ts, dur};
}

void trace_begin(trace_t *t, trace_phase_t phase)
{
	if ((unsigned)phase >= TRACE_N_PHASES)
		return;
	if (t->open >= 0)
		trace_end(t, (trace_phase_t)t->open);
	NVTX_PUSH(s_phase_names[phase]);
	t->open = (int)phase;
	if (t->collect)
		t->open_start_ns = s_ns(CLOCK_MONOTONIC);
}

void trace_end(trace_t *t, trace_phase_t phase)
{
	if (t->open < 0 || t->open != (int)phase)
		return;
	if (t->collect)
		s_record(t, t->open, s_ns(CLOCK_MONOTONIC));
	t->open = -1;
	NVTX_POP();
}

void trace_step_begin(trace_t *t, int64_t step, bool collect)
{
	if (t->in_step) {
		trace_step_t ignored;
		trace_step_end(t, &ignored);
	}
#ifdef RINGMASTER_NVTX
	char name[40];
	snprintf(name, sizeof name, "step %lld", (long long)step);
	nvtxRangePushA(name);
#endif
	t->in_step = true;
	t->step = step;
	t->collect = collect;
	t->n_events = 0;
	t->merged = -1;
	t->dur_us = 0;
	if (collect) {
		t->step_start_unix_us = s_ns(CLOCK_REALTIME) / 1000;
		t->step_start_ns = s_ns(CLOCK_MONOTONIC);
	}
}

bool trace_step_end(trace_t *t, trace_step_t *ret_step)
{
	if (!t->in_step)
		return false;
	if (t->open >= 0)
		trace_end(t, (trace_phase_t)t->open);
	t->in_step = false;
	NVTX_POP();
	if (!t->collect)
		return false;
	t->collect = false;
	t->dur_us = s_rel_us(t, s_ns(CLOCK_MONOTONIC));
	*ret_step = (trace_step_t){
		.step = t->step,
		.start_unix_us = t->step_start_unix_us,
		.dur_us = t->dur_us,
		.events = t->events,
		.n_events = t->n_events,
	};
	return true;
}
