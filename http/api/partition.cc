// /{db}/_partition/{partition}[/...]: a partitioned database's per-partition endpoints, as
// CouchDB 3.5's chttpd_db handle_partition_req serves them (answers checked against it).
//   GET  /{db}/_partition/{p}                                 the partition's counts and sizes
//   GET|POST /{db}/_partition/{p}/_all_docs[/queries]         _all_docs inside the partition
//   GET|POST /{db}/_partition/{p}/_design/{d}/_view/{v}       a partitioned view, one partition
//   GET  /{db}/_partition/{p}/_design/{d}/_info               as /{db}/_design/{d}/_info
//   POST /{db}/_partition/{p}/_find, _explain                 Mango inside the partition
// The sub-endpoints are the database's own, given Call::partition: the router strips the two
// segments and dispatches again.
#include "core/db/databases.h"
#include "core/db/keyspace.h"
#include "http/api/request.h"
#include "http/api/router.h"

namespace chaise::http {

namespace {

// couch_partition:validate_partition.
void validate_partition(const std::string& p) {
  if (p.empty()) throw HttpError(err::illegal_partition("Partition must not be empty"));
  if (p.front() == '_')
    throw HttpError(err::illegal_partition("Partition must not start with an underscore"));
  if (p.find(':') != std::string::npos)
    throw HttpError(err::illegal_partition("Partition must not contain a colon"));
}

bool served_below_partition(const std::vector<std::string>& rest) {
  if (rest.empty()) return false;
  const std::string& op = rest[0];
  if (op == "_all_docs") return rest.size() == 1 || (rest.size() == 2 && rest[1] == "queries");
  if (op == "_find" || op == "_explain") return rest.size() == 1;
  if (op == "_design" && rest.size() >= 3) {
    if (rest[2] == "_view") return rest.size() == 4 || (rest.size() == 5 && rest[4] == "queries");
    if (rest[2] == "_info") return rest.size() == 3;
  }
  return false;
}

}  // namespace

bool enter_partition(Call& call) {
  const std::string partition = call.path.at(2);
  validate_partition(partition);
  const core::DbRef db = open_db_or_throw(call);
  if (!db.partitioned) throw HttpError(err::bad_request("database is not partitioned"));
  if (call.path.size() == 3) return false;
  std::vector<std::string> rest(call.path.begin() + 3, call.path.end());
  if (!served_below_partition(rest)) throw HttpError(err::not_found());
  std::vector<std::string> path{call.path[0]};
  path.insert(path.end(), rest.begin(), rest.end());
  call.path = std::move(path);
  call.partition = partition;
  return true;
}

void partition_from_query(Call& call) {
  const auto& path = call.path;  // /{db}/... with any /_partition/{p} already taken out
  const bool all_docs = path.size() == 2 && path[1] == "_all_docs";
  const bool view = path.size() == 5 && path[1] == "_design" && path[3] == "_view";
  if (!all_docs && !view) return;
  const auto partition = call.query.get("partition");
  if (!partition) return;
  validate_partition(*partition);
  if (call.partition) {
    if (*call.partition != *partition)
      throw HttpError(err::bad_request("Conflicting value for `partition` in query string"));
    return;
  }
  if (all_docs && !open_db_or_throw(call).partitioned)
    throw HttpError(err::query_parse_error("`partition` parameter is not supported on this db"));
  call.partition = *partition;
}

Response partition_info(Call& call) {
  if (!call.is(beast_http::verb::get) && !call.is(beast_http::verb::head))
    throw_method_not_allowed("GET");
  const core::DbRef db = open_db_or_throw(call);
  const std::string& partition = call.path.at(2);
  auto tr = call.store().create_transaction();
  auto counter = [&](std::string_view name) {
    auto v = value_or_throw(
        tr.get(db.space.partition_counter_key(partition, name), storage::Snapshot::yes));
    return v.has_value() ? core::keyspace::decode_counter(*v) : std::int64_t{0};
  };
  Json body = Json::object();
  body["db_name"] = db.name;
  body["sizes"] = {{"active", counter(core::keyspace::kSizeActive)},
                   {"external", counter(core::keyspace::kSizeExternal)}};
  body["partition"] = partition;
  body["doc_count"] = counter(core::keyspace::kDocCount);
  body["doc_del_count"] = counter(core::keyspace::kDocDelCount);
  return json_response(call.req, Status::ok, body);
}

}  // namespace chaise::http
