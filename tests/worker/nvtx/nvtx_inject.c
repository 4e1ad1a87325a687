/*
 * nvtx_inject: a minimal NVTX v3 injection library for tests. NVTX loads it
 * when the process has NVTX_INJECTION64_PATH pointing at it (the way Nsight
 * Systems attaches) and calls InitializeInjectionNvtx2, which takes over
 * nvtxRangePushA and nvtxRangePop: each call appends a line "push NAME" or
 * "pop" to the file named by NVTX_TEST_LOG. test_nvtx.py reads it to check
 * the ranges `ringworker train` emits (worker/trace.c).
 */
#include <stdio.h>
#include <stdlib.h>

#include <nvtx3/nvToolsExt.h>

static FILE *s_log;

static int NVTX_API s_push(const char *message)
{
	fprintf(s_log, "push %s\n", message ? message : "(null)");
	return 0;
}

static int NVTX_API s_pop(void)
{
	fputs("pop\n", s_log);
	return 0;
}

/* The entry point NVTX looks up in the library (C linkage, exported). */
int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table);

int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table)
{
	const char *path = getenv("NVTX_TEST_LOG");
	const NvtxExportTableCallbacks *cb = get_export_table(NVTX_ETID_CALLBACKS);
	NvtxFunctionTable table = NULL;
	unsigned int size = 0;
	if (!path || !cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
	    size <= NVTX_CBID_CORE_RangePop)
		return 0;
	s_log = fopen(path, "w");
	if (!s_log)
		return 0;
	setvbuf(s_log, NULL, _IOLBF, 0);
	*table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)s_push;
	*table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)s_pop;
	return 1;
}
