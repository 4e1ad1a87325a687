/*
 * agent_host: the agent's pure helpers about its host (see agent.h, where
 * they are exported for tests): a slot's share of the CPUs, and the local
 * address that routes to the coordinator (what the agent advertises when
 * --advertise is not given).
 */
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int agent_cpu_share(const cpu_set_t *avail, int slot, int n_slots, cpu_set_t *ret_set)
{
	int cpus[CPU_SETSIZE];
	int c = 0;
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, avail))
			cpus[c++] = i;
	if (c == 0 || n_slots < 1 || slot < 0 || slot >= n_slots)
		return -EINVAL;
	CPU_ZERO(ret_set);
	if (n_slots > c) {
		CPU_SET(cpus[slot % c], ret_set);
		return 1;
	}
	int lo = (int)((int64_t)c * slot / n_slots), hi = (int)((int64_t)c * (slot + 1) / n_slots);
	for (int i = lo; i < hi; i++)
		CPU_SET(cpus[i], ret_set);
	return hi - lo;
}

/* Split tcp://HOST:PORT into host and port. 0 or -EINVAL. */
static int s_split_endpoint(const char *endpoint, char *host, size_t hostlen, char *port,
                            size_t portlen)
{
	const char *p = strstr(endpoint, "://");
	if (!p)
		return -EINVAL;
	p += 3;
	const char *h_end, *colon;
	if (*p == '[') {
		p++;
		h_end = strchr(p, ']');
		if (!h_end || h_end[1] != ':')
			return -EINVAL;
		colon = h_end + 1;
	} else {
		colon = strrchr(p, ':');
		if (!colon)
			return -EINVAL;
		h_end = colon;
	}
	size_t hl = (size_t)(h_end - p), pl = strlen(colon + 1);
	if (hl == 0 || hl >= hostlen || pl == 0 || pl >= portlen)
		return -EINVAL;
	memcpy(host, p, hl);
	host[hl] = '\0';
	memcpy(port, colon + 1, pl + 1);
	return 0;
}

int agent_route_address(const char *endpoint, char *buf, size_t buflen, char *err,
                        size_t errlen)
{
	char host[256], port[32];
	if (s_split_endpoint(endpoint, host, sizeof host, port, sizeof port) < 0) {
		snprintf(err, errlen, "coordinator endpoint '%s' is not tcp://HOST:PORT", endpoint);
		return -EINVAL;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM};
	struct addrinfo *res = NULL;
	int grc = getaddrinfo(host, port, &hints, &res);
	if (grc != 0) {
		snprintf(err, errlen, "cannot resolve '%s': %s (pass --advertise ADDR)", host,
		         gai_strerror(grc));
		return -EHOSTUNREACH;
	}
	int rc = -EHOSTUNREACH;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
			const void *addr = ss.ss_family == AF_INET6
			                           ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
			                           : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
			if (inet_ntop(ss.ss_family, addr, buf, (socklen_t)buflen))
				rc = 0;
		}
		close(fd);
		if (rc == 0)
			break;
	}
	freeaddrinfo(res);
	if (rc < 0)
		snprintf(err, errlen, "no route to '%s' (pass --advertise ADDR)", host);
	return rc;
}
