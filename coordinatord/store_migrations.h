/*
 * store_migrations: the schema history embedded in the binary, generated at
 * build time from schema/NNN_*.sql by schema/embed_migrations.py.
 *
 * Entries are in version order, versions 1..store_n_migrations without gaps.
 */
#ifndef RINGMASTER_COORDINATORD_STORE_MIGRATIONS_H
#define RINGMASTER_COORDINATORD_STORE_MIGRATIONS_H

typedef struct {
	int version;
	const char *name; /* "001_init" */
	const char *sql;  /* the whole file */
} store_migration_t;

extern const store_migration_t store_migrations[];
extern const int store_n_migrations;

#endif
