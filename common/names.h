/* The one rule for every name a user gives ShadowSync (a trainer, a dense
 * group, an embedding table), the same in every mode: in-process, agent
 * and PS. Such names travel in metric labels, JSON, file names and the
 * wire, so they need no escaping anywhere. */
#ifndef SS_COMMON_NAMES_H
#define SS_COMMON_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Buffer size that holds any valid name. */
#define SS_NAME_MAX  64
#define SS_NAME_RULE "1-63 characters of [A-Za-z0-9_.-], not starting with '.'"

/* true when name follows SS_NAME_RULE (NULL does not). */
bool ss__name_valid(const char *name);

/* The name of a group on a PS: a valid name, or a valid name followed by
 * the chunk range the client transport gives each chunk, "[lo:hi)". */
#define SS_PS_GROUP_RULE SS_NAME_RULE ", optionally followed by a chunk range [lo:hi)"
bool ss__ps_group_name_valid(const char *name);

/* A valid PS group name with a chunk range: true, with the length of the
 * name before '[' and the range's two numbers (not checked for lo < hi).
 * false for any other name. */
bool ss__ps_chunk_range(const char *name, size_t *base_len, uint64_t *lo, uint64_t *hi);

/* A listen or target address the way every flag takes one: "host:port"
 * or "[ipv6]:port", the host without spaces or colons (an IPv6 one in
 * brackets), the port 0-65535 in digits (0: the system picks one, where a
 * server listens). false, why naming flag and what is wrong, otherwise
 * (a loose parse would listen on a random port for "127.0.0.1:99999",
 * or on 443 for "127.0.0.1"). */
#define SS_ADDRESS_RULE "host:port or [ipv6]:port, port 0-65535; 0 picks one"
bool ss__address_valid(const char *address, const char *flag, char *why, size_t whylen);

/* A valid address's host (an IPv6 one without its brackets) into host,
 * and its port. false when the address is not valid or its host does not
 * fit. */
bool ss__address_split(const char *address, char *host, size_t hostlen, unsigned *port);

/* text's index in the name table names[0 .. n) (a setting's words: an
 * algorithm, an encoding, a mode; a NULL entry is a hole), or -1 when it
 * is none of them (or NULL). The one lookup every parser of such a word
 * uses (tests/repo/test_layers.sh finds an open-coded one). */
int ss__name_index(const char *text, const char *const *names, size_t n);

/* How long address's host part is as written (brackets and all): up to
 * its last ':', or the whole of it when it has none. For an address put
 * back together with another port, or a host compared as given. */
size_t ss__address_host_len(const char *address);

#endif
