"""Construct declarations of every extras and value layout: one declaration per wire layout.

Field order is wire order and names are kv_engine's (its protocol documents and ``mcbp`` sources) or Wireshark's
``couchbase.extras.*`` vocabulary. Everything else (decode, encode, hexdump spans, the JSON field list and the
Spark schema) is derived from these objects; nothing restates a layout.
"""

from __future__ import annotations

from construct import (
    Bytes,
    Const,
    Flag,
    GreedyRange,
    Int8ub,
    Int16ub,
    Int32ub,
    Int32ul,
    Int64ub,
    Int64ul,
    StringEncoded,
    Struct,
    this,
)

from dcpctl.protocol.flat import FlatString, FlatTable
from dcpctl.protocol.value import Leb128

# --- 1. headers -------------------------------------------------------------------------------------
request_header = Struct(
    "magic" / Int8ub,
    "opcode" / Int8ub,
    "key_length" / Int16ub,
    "extras_length" / Int8ub,
    "datatype" / Int8ub,
    "vbucket" / Int16ub,
    "total_body_length" / Int32ub,
    "opaque" / Int32ub,
    "cas" / Int64ub,
)
response_header = Struct(
    "magic" / Int8ub,
    "opcode" / Int8ub,
    "key_length" / Int16ub,
    "extras_length" / Int8ub,
    "datatype" / Int8ub,
    "status" / Int16ub,
    "total_body_length" / Int32ub,
    "opaque" / Int32ub,
    "cas" / Int64ub,
)
alt_request_header = Struct(
    "magic" / Int8ub,
    "opcode" / Int8ub,
    "framing_extras_length" / Int8ub,
    "key_length" / Int8ub,
    "extras_length" / Int8ub,
    "datatype" / Int8ub,
    "vbucket" / Int16ub,
    "total_body_length" / Int32ub,
    "opaque" / Int32ub,
    "cas" / Int64ub,
)
alt_response_header = Struct(
    "magic" / Int8ub,
    "opcode" / Int8ub,
    "framing_extras_length" / Int8ub,
    "key_length" / Int8ub,
    "extras_length" / Int8ub,
    "datatype" / Int8ub,
    "status" / Int16ub,
    "total_body_length" / Int32ub,
    "opaque" / Int32ub,
    "cas" / Int64ub,
)
# UPR transport draft (seed 001): byte 5 is the request/response/message type, bytes 6-7 always a vbucket.
upr_draft_header = Struct(
    "magic" / Int8ub,
    "opcode" / Int8ub,
    "key_length" / Int16ub,
    "extras_length" / Int8ub,
    "request_type" / Int8ub,
    "vbucket" / Int16ub,
    "total_body_length" / Int32ub,
    "opaque" / Int32ub,
    "cas" / Int64ub,
)
HEADER_LENGTH: int = request_header.sizeof()
# Every name a header field has, in any of the headers above
HEADER_FIELDS: frozenset[str] = frozenset(
    sub.name for header in (request_header, response_header, alt_request_header, alt_response_header,
                            upr_draft_header) for sub in header.subcons)

# --- 2. frame infos (values after the id/length nibbles) --------------------------------------------
stream_id_frame = Struct("stream_id" / Int16ub)
durability_frame = Struct("durability_level" / Int8ub)
durability_timeout_frame = Struct("durability_level" / Int8ub, "durability_timeout" / Int16ub)
impersonate_token_frame = Struct("token_id" / Int16ub)
server_duration_frame = Struct("server_duration_encoded" / Int16ub)
read_units_frame = Struct("read_units" / Int16ub)
write_units_frame = Struct("write_units" / Int16ub)
throttle_duration_frame = Struct("throttle_duration_encoded" / Int16ub)

# --- 3. DCP extras ----------------------------------------------------------------------------------
dcp_open_extras = Struct("seqno" / Int32ub, "flags" / Int32ub)
add_stream_extras = Struct("flags" / Int32ub)
add_stream_response_extras = Struct("stream_opaque" / Int32ub)
stream_req_extras = Struct(
    "flags" / Int32ub,
    "reserved" / Int32ub,
    "start_seqno" / Int64ub,
    "end_seqno" / Int64ub,
    "vbucket_uuid" / Int64ub,
    "snap_start_seqno" / Int64ub,
    "snap_end_seqno" / Int64ub,
)
# Oct 2013 - Apr 2014 layout (reference 11; seed 000's second request): ends in the high seqno.
stream_req_v0_extras = Struct(
    "flags" / Int32ub,
    "reserved" / Int32ub,
    "start_seqno" / Int64ub,
    "end_seqno" / Int64ub,
    "vbucket_uuid" / Int64ub,
    "high_seqno" / Int64ub,
)
# Seed 000 puts the rollback seqno in the extras of its rollback response; servers send it as the value.
rollback_extras = Struct("rollback_seqno" / Int64ub)
stream_end_extras = Struct("stream_end_status" / Int32ub)
snapshot_marker_v1_extras = Struct(
    "snap_start_seqno" / Int64ub,
    "snap_end_seqno" / Int64ub,
    "snapshot_flags" / Int32ub,
)
snapshot_marker_v2_extras = Struct("marker_version" / Int8ub)
mutation_extras = Struct(
    "by_seqno" / Int64ub,
    "rev_seqno" / Int64ub,
    "flags" / Int32ub,
    "expiration" / Int32ub,
    "lock_time" / Int32ub,
    "nmeta" / Int16ub,
    "nru" / Int8ub,
)
deletion_v1_extras = Struct("by_seqno" / Int64ub, "rev_seqno" / Int64ub, "nmeta" / Int16ub)
deletion_v2_extras = Struct(
    "by_seqno" / Int64ub,
    "rev_seqno" / Int64ub,
    "delete_time" / Int32ub,
    "unused" / Int8ub,
)
expiration_extras = Struct("by_seqno" / Int64ub, "rev_seqno" / Int64ub, "delete_time" / Int32ub)
set_vbucket_state_extras = Struct("vbucket_state" / Int8ub)
buffer_ack_extras = Struct("bytes_to_ack" / Int32ub)
system_event_extras = Struct("by_seqno" / Int64ub, "event_id" / Int32ub, "event_version" / Int8ub)
prepare_extras = Struct(
    "by_seqno" / Int64ub,
    "rev_seqno" / Int64ub,
    "flags" / Int32ub,
    "expiration" / Int32ub,
    "lock_time" / Int32ub,
    "nru" / Int8ub,
    "deleted" / Int8ub,
    "durability_level" / Int8ub,
)
seqno_acknowledged_extras = Struct("prepared_seqno" / Int64ub)
commit_extras = Struct("prepared_seqno" / Int64ub, "commit_seqno" / Int64ub)
abort_extras = Struct("prepared_seqno" / Int64ub, "abort_seqno" / Int64ub)
seqno_advanced_extras = Struct("by_seqno" / Int64ub)
oso_snapshot_extras = Struct("oso_flags" / Int32ub)

# --- 3. DCP values ----------------------------------------------------------------------------------
failover_entry = Struct("vbucket_uuid" / Int64ub, "seqno" / Int64ub)
failover_log_value = Struct("failover_log" / GreedyRange(failover_entry))
rollback_value = Struct("rollback_seqno" / Int64ub)
snapshot_marker_v2_0_value = Struct(
    "snap_start_seqno" / Int64ub,
    "snap_end_seqno" / Int64ub,
    "snapshot_flags" / Int32ub,
    "max_visible_seqno" / Int64ub,
    "high_completed_seqno" / Int64ub,
)
# v2.1 and v2.2 extend v2.0: the same fields first, then their own.
snapshot_marker_v2_1_value = Struct(*snapshot_marker_v2_0_value.subcons, "timestamp" / Int64ub)
snapshot_marker_v2_2_value = Struct(
    *snapshot_marker_v2_0_value.subcons,
    "purge_seqno" / Int64ub,
    "high_prepared_seqno" / Int64ub,
)
begin_collection_v0_value = Struct(
    "manifest_uid" / Int64ub, "scope_id" / Int32ub, "collection_id" / Int32ub
)
begin_collection_v1_value = Struct(
    "manifest_uid" / Int64ub, "scope_id" / Int32ub, "collection_id" / Int32ub, "max_ttl" / Int32ub
)
end_collection_value = Struct("manifest_uid" / Int64ub, "scope_id" / Int32ub, "collection_id" / Int32ub)
create_scope_value = Struct("manifest_uid" / Int64ub, "scope_id" / Int32ub)
drop_scope_value = Struct("manifest_uid" / Int64ub, "scope_id" / Int32ub)
# Version 2 (DCP_CONTROL flatbuffers_system_events): FlatBuffers tables, little-endian, slots in the order of
# kv_engine's events.fbs (Collection for a create, a flush and a modify); a field that says what a version-0
# field says has its name ("uid" is the manifest uid).
collection_v2_value = FlatTable(
    "manifest_uid" / Int64ul,
    "scope_id" / Int32ul,
    "collection_id" / Int32ul,
    "ttl_valid" / Flag,
    "max_ttl" / Int32ul,
    "name" / FlatString,
    "history" / Flag,  # 7.2
    "default_collection_mvs" / Int64ul,  # 7.2.4
    "metered" / Flag,  # 7.6
    "flush_uid" / Int64ul,  # 8.0
)
dropped_collection_v2_value = FlatTable(
    "manifest_uid" / Int64ul, "scope_id" / Int32ul, "collection_id" / Int32ul, "system_collection" / Flag
)
scope_v2_value = FlatTable("manifest_uid" / Int64ul, "scope_id" / Int32ul, "name" / FlatString)
dropped_scope_v2_value = FlatTable("manifest_uid" / Int64ul, "scope_id" / Int32ul, "system_scope" / Flag)
cache_transfer_record = Struct(
    "cas" / Int64ub,
    "by_seqno" / Int64ub,
    "rev_seqno" / Int64ub,
    "value_length" / Int32ub,
    "flags" / Int32ub,
    "expiration" / Int32ub,
    "key_length" / Int16ub,
    "datatype" / Int8ub,
    "cache_hint" / Int8ub,
    "key" / Bytes(this.key_length),
    "value" / Bytes(this.value_length),
)
cache_transfer_value = Struct("records" / GreedyRange(cache_transfer_record))

# --- 4. non-DCP commands ----------------------------------------------------------------------------
hello_value = Struct("features" / GreedyRange(Int16ub))
error_map_request_value = Struct("error_map_version" / Int16ub)
cluster_config_extras = Struct("epoch" / Int64ub, "revision" / Int64ub)
get_all_vb_seqnos_state_extras = Struct("vbucket_state_filter" / Int32ub)
get_all_vb_seqnos_extras = Struct("vbucket_state_filter" / Int32ub, "collection_id" / Int32ub)
vb_seqno_entry = Struct("vbucket" / Int16ub, "seqno" / Int64ub)
get_all_vb_seqnos_value = Struct("vbucket_seqnos" / GreedyRange(vb_seqno_entry))
observe_seqno_request_value = Struct("vbucket_uuid" / Int64ub)
observe_seqno_v0_value = Struct(
    "format_type" / Const(0, Int8ub),
    "observed_vbucket" / Int16ub,
    "vbucket_uuid" / Int64ub,
    "last_persisted_seqno" / Int64ub,
    "current_seqno" / Int64ub,
)
observe_seqno_v1_value = Struct(
    "format_type" / Const(1, Int8ub),
    "observed_vbucket" / Int16ub,
    "vbucket_uuid" / Int64ub,
    "last_persisted_seqno" / Int64ub,
    "current_seqno" / Int64ub,
    "old_vbucket_uuid" / Int64ub,
    "last_received_seqno" / Int64ub,
)
clustermap_notification_extras = Struct("revision" / Int32ub)
clustermap_notification_epoch_extras = Struct("epoch" / Int64ub, "revision" / Int64ub)

# --- 5. KV commands (kv_engine docs/BinaryProtocol.md and its per-command pages) -------------------
# GET family responses, GET_RANDOM_KEY, GET_LOCKED, GET_REPLICA: the document's user flags.
get_response_extras = Struct("flags" / Int32ub)
# GAT, GATQ, TOUCH requests: the new expiry; GET_LOCKED's optional lock timeout (Wireshark shows it so).
expiration_request_extras = Struct("expiration" / Int32ub)
# SET, ADD, REPLACE (+quiet) requests.
store_extras = Struct("flags" / Int32ub, "expiration" / Int32ub)
# INCREMENT, DECREMENT (+quiet) requests; an expiration of 0xffffffff means "fail if the counter is missing".
arithmetic_extras = Struct("delta" / Int64ub, "initial" / Int64ub, "expiration" / Int32ub)
arithmetic_response_value = Struct("counter" / Int64ub)
# Mutation responses when HELLO MutationSeqno is on: the mutation token.
mutation_token_extras = Struct("vbucket_uuid" / Int64ub, "mutation_seqno" / Int64ub)
# GET_RANDOM_KEY with collections: the collection to pick from (Wireshark: no field; kv_engine's name).
random_key_extras = Struct("collection_id" / Int32ub)
# ... and with a non-zero byte after it, the document's xattrs too (HELLO GetRandomKeyIncludeXattr).
random_key_xattr_extras = Struct("collection_id" / Int32ub, "include_xattrs" / Int8ub)
# GET_META request: 1 = the 20-byte response, 2 = with the document's datatype (21 bytes).
get_meta_request_extras = Struct("meta_version" / Int8ub)
get_meta_response_extras = Struct(
    "deleted" / Int32ub,
    "flags" / Int32ub,
    "expiration" / Int32ub,
    "seqno" / Int64ub,
)
# Version 2 adds the document's datatype; named apart from the header's datatype, which a record also has.
get_meta_v2_response_extras = Struct(*get_meta_response_extras.subcons, "meta_datatype" / Int8ub)
collections_get_id_response_extras = Struct("manifest_uid" / Int64ub, "collection_id" / Int32ub)
collections_get_scope_id_response_extras = Struct("manifest_uid" / Int64ub, "scope_id" / Int32ub)

# --- XDCR's *_WITH_META commands (kv_engine include/memcached/protocol_binary.h, SetWithMetaPayload and
# DelWithMetaPayload): the document's metadata as the source cluster had it, then options and/or an nmeta
# length (26, 28, 30 bytes). The CAS is meta_cas: a record's cas is the header's.
with_meta_extras = Struct("flags" / Int32ub, "expiration" / Int32ub, "seqno" / Int64ub, "meta_cas" / Int64ub)
with_meta_nmeta_extras = Struct(*with_meta_extras.subcons, "nmeta" / Int16ub)
with_meta_options_extras = Struct(*with_meta_extras.subcons, "options" / Int32ub)
with_meta_options_nmeta_extras = Struct(*with_meta_extras.subcons, "options" / Int32ub, "nmeta" / Int16ub)
# OBSERVE (0x92): keys by vbucket; the answer adds each key's state and CAS.
observe_key = Struct("vbucket" / Int16ub, "key_length" / Int16ub, "key" / Bytes(this.key_length))
observe_request_value = Struct("observe_keys" / GreedyRange(observe_key))
observe_key_state = Struct(
    "vbucket" / Int16ub,
    "key_length" / Int16ub,
    "key" / Bytes(this.key_length),
    "key_state" / Int8ub,
    "cas" / Int64ub,
)
observe_response_value = Struct("observe_states" / GreedyRange(observe_key_state))

# --- range scans (kv_engine docs/range_scans/range_scan_{create,continue,cancel}.md) ----------------
# The 16-byte scan uuid the create answers with (its value) names the scan in CONTINUE's and CANCEL's extras;
# extras are integer layouts, so there it is its two 8-byte halves in network order.
range_scan_create_response_value = Struct("scan_uuid" / Bytes(16))
range_scan_cancel_extras = Struct("scan_uuid_hi" / Int64ub, "scan_uuid_lo" / Int64ub)
range_scan_continue_extras = Struct(*range_scan_cancel_extras.subcons, "item_limit" / Int32ub,
                                    "time_limit" / Int32ub, "byte_limit" / Int32ub)
# Each CONTINUE response's 4-byte extras say what its value holds: 0 keys (a key_only scan), 1 documents.
range_scan_continue_response_extras = Struct("scan_flags" / Int32ub)
range_scan_key = Struct("key_length" / Leb128(), "key" / Bytes(this.key_length))
range_scan_keys_value = Struct("scan_keys" / GreedyRange(range_scan_key))
range_scan_document = Struct(
    "flags" / Int32ub,
    "expiration" / Int32ub,
    "seqno" / Int64ub,
    "cas" / Int64ub,
    "datatype" / Int8ub,
    "key_length" / Leb128(),
    "key" / Bytes(this.key_length),
    "value_length" / Leb128(),
    "value" / Bytes(this.value_length),
)
range_scan_documents_value = Struct("scan_documents" / GreedyRange(range_scan_document))

# --- 6. subdocument commands (kv_engine docs/SubDocument.md) -----------------------------------------
# Single-path requests: the path's length and the path flags, then optionally the expiry and the document
# flags; the value is the path followed by the operation's value.
subdoc_extras = Struct("path_length" / Int16ub, "subdoc_flags" / Int8ub)
subdoc_doc_flags_extras = Struct(*subdoc_extras.subcons, "doc_flags" / Int8ub)
subdoc_expiry_extras = Struct(*subdoc_extras.subcons, "expiration" / Int32ub)
subdoc_expiry_doc_flags_extras = Struct(*subdoc_extras.subcons, "expiration" / Int32ub, "doc_flags" / Int8ub)
# Multi-path requests: optionally the expiry (mutations) and the document flags.
multi_doc_flags_extras = Struct("doc_flags" / Int8ub)
multi_expiry_extras = Struct("expiration" / Int32ub)
multi_expiry_doc_flags_extras = Struct("expiration" / Int32ub, "doc_flags" / Int8ub)
# A path is UTF-8 text (a JSON path or an xattr key); a spec that is not UTF-8 leaves the value raw.
_path = "path" / StringEncoded(Bytes(this.path_length), "utf8")
lookup_spec = Struct("opcode" / Int8ub, "flags" / Int8ub, "path_length" / Int16ub, _path)
multi_lookup_value = Struct("lookup_specs" / GreedyRange(lookup_spec))
mutation_spec = Struct(
    "opcode" / Int8ub,
    "flags" / Int8ub,
    "path_length" / Int16ub,
    "value_length" / Int32ub,
    _path,
    "value" / StringEncoded(Bytes(this.value_length), "utf8"),
)
multi_mutation_value = Struct("mutation_specs" / GreedyRange(mutation_spec))
# Each lookup's result in request order; each mutation's that returns a value (a counter), by spec index.
lookup_result = Struct(
    "status" / Int16ub,
    "value_length" / Int32ub,
    "value" / StringEncoded(Bytes(this.value_length), "utf8"),
)
multi_lookup_response_value = Struct("lookup_results" / GreedyRange(lookup_result))
mutation_result = Struct(
    "index" / Int8ub,
    "status" / Int16ub,
    "value_length" / Int32ub,
    "value" / StringEncoded(Bytes(this.value_length), "utf8"),
)
multi_mutation_response_value = Struct("mutation_results" / GreedyRange(mutation_result))
# SubdocMultiPathFailure of a mutation: the first spec that failed and its status.
multi_mutation_failure_value = Struct("failed_index" / Int8ub, "failed_status" / Int16ub)

# --- UPR transport draft (seed 001) -------------------------------------------------------------------
upr_stream_req_extras = Struct(
    "start_seqno" / Int64ub,
    "end_seqno" / Int64ub,
    "vbucket_uuid" / Int64ub,
    "high_seqno" / Int64ub,
)
upr_mutation_extras = Struct(
    "by_seqno" / Int64ub,
    "rev_seqno" / Int64ub,
    "flags" / Int32ub,
    "expiration" / Int32ub,
    "lock_time" / Int32ub,
)
upr_failover_entry = Struct("vbucket_uuid" / Int64ub, "high_seqno" / Int64ub)
upr_failover_log_value = Struct("failover_log" / GreedyRange(upr_failover_entry))
