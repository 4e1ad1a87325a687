/*
 * initrand: deterministic normal initialisation (see initrand.h). Moved
 * unchanged from gpt2.c so that GPT-2 keeps its bits and Llama shares them.
 */
#include "initrand.h"

#include <math.h>

static uint64_t s_splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* A uniform double in (0, 1] from 53 random bits. */
static double s_unit(uint64_t r)
{
	return ((double)(r >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

void initrand_normal(float *x, size_t from, size_t to, uint64_t seed, uint64_t key, double std)
{
	uint64_t stream = s_splitmix64(seed ^ s_splitmix64(key + 0x243f6a8885a308d3ull));
#pragma omp parallel for schedule(static)
	for (size_t i = from; i < to; i++) {
		size_t j = i / 2;
		uint64_t r1 = s_splitmix64(stream + 2 * j), r2 = s_splitmix64(stream + 2 * j + 1);
		double rad = sqrt(-2.0 * log(s_unit(r1))) * std;
		double ang = 2.0 * M_PI * s_unit(r2);
		x[i - from] = (float)(rad * (i % 2 == 0 ? cos(ang) : sin(ang)));
	}
}
