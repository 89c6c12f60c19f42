// storage/fdb/fdb_network.h — internal to storage/fdb/: the process's one FoundationDB client
// network. FoundationDB allows fdb_select_api_version and fdb_setup_network once per process, and
// its network runs on one thread (fdb_run_network) that every future's callback runs on.
//
// start() loads libfdb_c (dlopen), selects the API version, sets the client knobs, sets the network
// up and starts its thread, on the first call; later calls return the same API and must name the
// same library, version and knobs. The network stops, and its thread is joined, when the process
// exits (an atexit handler, stop_network_at_exit), never before: FoundationDB cannot start it
// again.
//
// Threading: start() is thread-safe; the FdbApi it returns is immutable and lives to the end of the
// process.
#pragma once

#include <string>
#include <vector>

#include "storage/error.h"
#include "storage/fdb/fdb_c_api.h"

namespace chaise::storage::fdb {

// The API with the network running. `knobs` are FoundationDB client knobs, "name=value" each
// (FDB_NET_OPTION_KNOB). Errors: invalid_option_value (an API version outside
// [kApiVersionMin, kHeaderApiVersion], a knob the library refuses, or another library, version or
// knobs than the first start's), io_error (the library cannot be loaded, lacks a function, or
// refuses the version or the network setup; `why` says which).
Result<const FdbApi*> start_network(const std::string& library, int api_version,
                                    const std::vector<std::string>& knobs, std::string* why);

// Makes the network stop when the process exits (idempotent). Called once a handle has run a
// transaction: see fdb_network.cc.
void stop_network_at_exit();

// The oldest API version whose C declarations fdb_c_api.h matches.
inline constexpr int kApiVersionMin = 710;

}  // namespace chaise::storage::fdb
