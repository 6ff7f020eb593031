// Package resp reads and writes the Redis serialization protocol: RESP2,
// and the RESP3 types a server sends after HELLO 3.
//
// Reader parses what a client sends: commands as arrays of bulk strings
// ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n") or inline commands ("GET k\r\n", as
// telnet and redis-cli's interactive mode may send), within Limits on the
// bulk length, the argument count and the inline line length. A stream that
// breaks the protocol or a limit gives a *ProtocolError: the caller answers
// it and closes the connection, since the rest of the stream cannot be
// framed. Writer encodes replies for a protocol version (2 or 3): the RESP3
// types (null, map, set, double, verbatim string) fall back to their RESP2
// forms when the version is 2, as Redis does.
//
// The package knows nothing of commands, keys or the store; internal/redisapi
// is the server that uses it. ParseReply reads replies, for tests and tools.
package resp
