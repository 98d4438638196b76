/* Bulk floats on the protobuf wire without protobuf-c copying them.
 *
 * A message whose last field is a length-delimited `bytes` field F holds
 * F's payload at its very end, and the bytes before F's tag are a valid
 * message of the same type without F. So a sender packs the small fields
 * with protobuf-c, appends F's tag and length (ss__pb_bytes_header) and
 * sends the floats as a slice of their own, from where they lie; a
 * receiver finds F at the end (ss__pb_find_trailing_bytes), unpacks only
 * the prefix and reads the floats in place. The bytes on the wire are the
 * ordinary encoding of the .proto message: any other client and server
 * still understand them, and a message in another field order takes the
 * ordinary (copying) path. */
#ifndef SS_RPC_PB_WIRE_H
#define SS_RPC_PB_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Room for a tag and a length varint. */
#define SS_PB_BYTES_HEADER_MAX 16

/* Writes the tag of length-delimited field `field` and the varint of len
 * into out (SS_PB_BYTES_HEADER_MAX bytes); returns how many it wrote. */
size_t ss__pb_bytes_header(uint32_t field, uint64_t len, uint8_t *out);

/* true when buf[0..len) is a well-formed sequence of fields in which
 * field `field` occurs exactly once, length-delimited, and ends the
 * message: *prefix_len is where its tag starts, *payload_off where its
 * bytes start (they run to len). false for anything else (malformed,
 * missing, repeated, not last, groups): take the ordinary path. */
bool ss__pb_find_trailing_bytes(const uint8_t *buf, size_t len, uint32_t field, size_t *prefix_len,
                                size_t *payload_off);

/* The same from the first `have` bytes of a message of len bytes (a
 * reply still in gRPC's slices): true when F's tag and length lie within
 * them and F runs to len. false also when a field before F runs past
 * `have` (read more, or take the ordinary path). */
bool ss__pb_find_trailing_bytes_in(const uint8_t *buf, size_t have, size_t len, uint32_t field,
                                   size_t *prefix_len, size_t *payload_off);

#endif
