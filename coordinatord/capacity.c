/*
 * capacity: the alive workers' memory, shared by the broker loop and the
 * HTTP threads (see capacity.h).
 */
#include "capacity.h"

#include <pthread.h>

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static capacity_t s_now;

void capacity_publish(const capacity_t *c)
{
	pthread_mutex_lock(&s_lock);
	s_now = *c;
	pthread_mutex_unlock(&s_lock);
}

void capacity_get(capacity_t *ret)
{
	pthread_mutex_lock(&s_lock);
	*ret = s_now;
	pthread_mutex_unlock(&s_lock);
}
