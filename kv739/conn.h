/*
 * conn.h — one RESP connection to one server: connect with a timeout, send
 * a command as an array of bulk strings, read one reply. Internal to
 * lib739kv (hidden symbols).
 */
#ifndef KV739_CONN_H
#define KV739_CONN_H

#include <stddef.h>
#include <sys/types.h>

#define CONN_BUF 8192

/* conn_call's answer when the peer closed the connection before a whole
 * reply came (a dying server does): the request was sent. */
#define CONN_DROPPED (-2)

typedef struct conn {
	int fd; /* -1: not connected */
	dev_t dev; /* fd's socket, to recognise it after a fork */
	ino_t ino;
	char buf[CONN_BUF];
	size_t start, end; /* unread bytes are buf[start:end] */
	int dropped;       /* the last read found the connection closed by the peer */
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

/* Deadlines are absolute, in conn_now_ms's milliseconds (CLOCK_MONOTONIC):
 * a call's deadline bounds all its waits together, so a server that
 * answers a byte at a time cannot stretch it. */
long long conn_now_ms(void);

void conn_init(conn *c);
/* conn_open connects to host:port by deadline; 0 or -1. The host name's
 * lookup (getaddrinfo) is bounded by the resolver's own timeouts only. */
int conn_open(conn *c, const char *host, const char *port, long long deadline);
void conn_close(conn *c);
/* conn_idle reports whether c is open with nothing unread: no bytes
 * buffered or waiting on the socket, and not closed by the peer. A reply
 * nobody asked for would be taken as the next command's answer. */
int conn_idle(conn *c);
/* conn_forget drops the connection in a forked child: it closes the
 * descriptor only if it still is the socket conn_open made (the child may
 * have closed it and reused the number for a file of its own). */
void conn_forget(conn *c);
/* conn_call sends argv (argc strings, lengths in lens) and reads one reply
 * into r, by deadline. 0; or -1, or CONN_DROPPED if the peer closed the
 * connection while the reply was awaited: then the connection is closed
 * and its state unknown. */
int conn_call(conn *c, int argc, const char **argv, const size_t *lens, reply *r, long long deadline);
void reply_free(reply *r);

#endif
