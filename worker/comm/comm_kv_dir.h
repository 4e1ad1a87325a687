/*
 * comm_kv_dir: a rendezvous store (comm_kv_t) on a directory, for ranks on
 * one machine or on hosts that share a file system: the tests and
 * benchmarks that fork ranks use it, and so can a user who starts ranks by
 * hand (like Gloo's FileStore or torch's file:// init). In a cluster the
 * coordinator's KV takes its place.
 *
 * set writes the value to a temporary file in the directory and renames it
 * over the key's file (atomic: a reader sees all of a value or none); get
 * polls every millisecond until the key's file exists or the timeout
 * passes. Keys map to file names "k_<key>" with '/' replaced by '_'. The
 * directory must exist; the store never removes what it wrote.
 */
#ifndef RINGMASTER_WORKER_COMM_KV_DIR_H
#define RINGMASTER_WORKER_COMM_KV_DIR_H

#include "comm.h"

/* A KV on `dir` (borrowed: it must outlive every use of the KV). */
comm_kv_t comm_kv_dir_make(const char *dir);

#endif
