/*
 * conn.h — one RESP connection to one server: connect with a timeout, send
 * a command as an array of bulk strings, read one reply. Internal to
 * lib739kv (hidden symbols).
 */
#ifndef KV739_CONN_H
#define KV739_CONN_H

#include <stddef.h>

#define CONN_BUF 8192

typedef struct conn {
	int fd; /* -1: not connected */
	char buf[CONN_BUF];
	size_t start, end; /* unread bytes are buf[start:end] */
} conn;

/* reply kinds */
enum { R_STATUS = 1, R_ERROR, R_INT, R_BULK, R_NIL, R_ARRAY };

/* reply is one RESP reply. For R_STATUS, R_ERROR and R_BULK, str holds len
 * bytes and a NUL; for R_ARRAY, elems holds n replies. */
typedef struct reply {
	int kind;
	long long integer;
	char *str;
	size_t len;
	struct reply *elems;
	size_t n;
} reply;

void conn_init(conn *c);
/* conn_open connects to host:port within timeout_ms; 0 or -1. */
int conn_open(conn *c, const char *host, const char *port, int timeout_ms);
void conn_close(conn *c);
/* conn_call sends argv (argc strings, lengths in lens) and reads one reply
 * into r, within timeout_ms for each read or write. 0, or -1 (the
 * connection is closed: its state is unknown). */
int conn_call(conn *c, int argc, const char **argv, const size_t *lens, reply *r, int timeout_ms);
void reply_free(reply *r);

#endif
