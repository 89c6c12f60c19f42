// core/security/replicator_docs.h — the rules of the _replicator database's documents, as CouchDB 3.5's
// couch_replicator_docs applies them (before_doc_update/3, after_doc_read/2) and
// couch_replicator_parse:parse_rep_doc_without_id/1 validates them.
//
// Chaise does not run replications (POST /_replicate answers 501), but _replicator documents
// keep CouchDB's rules, so that one user cannot edit another's jobs or read their credentials:
// - A write by a user who is not the document's owner is refused unless the user is an admin;
//   a document without "owner" gets the writer's name.
// - A replication document must parse as one; the reason is CouchDB's, as a 403 forbidden.
// - A reader who is not an admin and not the owner sees source and target without credentials
//   (user:password@ in URLs, "headers" and "auth" in endpoint objects), under a revision id made
//   up the way CouchDB makes it up (the hash of that edited body as a child of the parent).
//
// Contract: pure functions, thread-safe, no I/O; nothing throws except std::bad_alloc.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/security/security.h"
#include "core/util/error.h"

namespace chaise::core {

inline constexpr std::string_view kReplicatorDb = "_replicator";
// Members of this role write replication documents as the replicator itself (no owner rule,
// no validation).
inline constexpr std::string_view kReplicatorRole = "_replicator";

// before_doc_update for a write to _replicator of `doc`, the whole document JSON (_id, _deleted,
// ...; not a design or _local document), new_edits=false included (CouchDB 3.5 skips only its
// internal replication). Sets "owner" where CouchDB sets it; returns the 403 CouchDB answers.
std::optional<CouchError> prepare_replicator_doc(nlohmann::ordered_json& doc, const UserCtx& writer,
                                                 bool writer_is_admin);

// parse_rep_doc_without_id: nullopt for a valid replication document, else CouchDB's reason.
std::optional<std::string> replication_doc_error(const nlohmann::ordered_json& doc);

// after_doc_read for a reader who is not an admin: the body (JSON text, an object) as that
// reader sees it, or nullopt when the reader owns it and sees it as stored.
std::optional<std::string> masked_replicator_body(std::string_view body_json,
                                                  const std::optional<std::string>& reader);

// "http(s)://user:password@rest" -> "http(s)://rest" (couch_replicator_docs:strip_credentials).
std::string strip_url_credentials(const std::string& url);

}  // namespace chaise::core
