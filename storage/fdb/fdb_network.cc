#include "storage/fdb/fdb_network.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace chaise::storage::fdb {
namespace {

// Resolves every FdbApi function from `lib`; false (with the missing name in *why) if one lacks.
bool load_functions(void* lib, FdbApi& api, std::string* why) {
  bool ok = true;
  auto load = [&](auto& fn, const char* name) {
    void* sym = dlsym(lib, name);
    if (!sym) {
      if (ok && why) *why = std::string("libfdb_c lacks ") + name;
      ok = false;
      return;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
  };
  load(api.get_error, "fdb_get_error");
  load(api.error_predicate, "fdb_error_predicate");
  load(api.select_api_version_impl, "fdb_select_api_version_impl");
  load(api.network_set_option, "fdb_network_set_option");
  load(api.setup_network, "fdb_setup_network");
  load(api.run_network, "fdb_run_network");
  load(api.stop_network, "fdb_stop_network");
  load(api.create_database, "fdb_create_database");
  load(api.database_destroy, "fdb_database_destroy");
  load(api.database_set_option, "fdb_database_set_option");
  load(api.database_create_transaction, "fdb_database_create_transaction");
  load(api.future_cancel, "fdb_future_cancel");
  load(api.future_destroy, "fdb_future_destroy");
  load(api.future_is_ready, "fdb_future_is_ready");
  load(api.future_set_callback, "fdb_future_set_callback");
  load(api.future_get_error, "fdb_future_get_error");
  load(api.future_get_int64, "fdb_future_get_int64");
  load(api.future_get_key, "fdb_future_get_key");
  load(api.future_get_value, "fdb_future_get_value");
  load(api.future_get_keyvalue_array, "fdb_future_get_keyvalue_array");
  load(api.transaction_destroy, "fdb_transaction_destroy");
  load(api.transaction_set_option, "fdb_transaction_set_option");
  load(api.transaction_get_read_version, "fdb_transaction_get_read_version");
  load(api.transaction_set_read_version, "fdb_transaction_set_read_version");
  load(api.transaction_get, "fdb_transaction_get");
  load(api.transaction_get_key, "fdb_transaction_get_key");
  load(api.transaction_get_range, "fdb_transaction_get_range");
  load(api.transaction_set, "fdb_transaction_set");
  load(api.transaction_atomic_op, "fdb_transaction_atomic_op");
  load(api.transaction_clear, "fdb_transaction_clear");
  load(api.transaction_clear_range, "fdb_transaction_clear_range");
  load(api.transaction_watch, "fdb_transaction_watch");
  load(api.transaction_commit, "fdb_transaction_commit");
  load(api.transaction_get_committed_version, "fdb_transaction_get_committed_version");
  load(api.transaction_get_versionstamp, "fdb_transaction_get_versionstamp");
  load(api.transaction_on_error, "fdb_transaction_on_error");
  load(api.transaction_reset, "fdb_transaction_reset");
  load(api.transaction_add_conflict_range, "fdb_transaction_add_conflict_range");
  load(api.transaction_get_estimated_range_size_bytes,
       "fdb_transaction_get_estimated_range_size_bytes");
  return ok;
}

class Network;
Network& network();

// The process's network: set up once, stopped at exit. Its mutex guards every field.
//
// It stops in an atexit handler (stop_at_exit): exit runs handlers and static destructors in the
// reverse order of their registration, so the network stops before libfdb_c's own statics go
// (stopping it after them hangs or crashes its thread). The object itself is never
// destroyed, and the library never unloaded: objects it made may be released after the stop.
class Network {
 public:
  // Registers stop() to run at exit, once: after the process's first handle has done a first
  // transaction, so that libfdb_c's statics made by then (some are made on first use) are
  // destroyed after the network stops, not before.
  void stop_at_exit() {
    std::lock_guard lock(mu_);
    if (stop_registered_ || !thread_.joinable()) return;
    stop_registered_ = true;
    std::atexit([] { network().stop(); });
  }

  void stop() {
    std::lock_guard lock(mu_);
    if (!thread_.joinable()) return;
    if (fdb_error_t e = api_.stop_network(); e != 0)
      std::fprintf(stderr, "chaise: fdb_stop_network: %s\n", api_.get_error(e));
    thread_.join();
  }

  Result<const FdbApi*> start(const std::string& library, int api_version,
                              const std::vector<std::string>& knobs, std::string* why) {
    std::lock_guard lock(mu_);
    if (thread_.joinable()) {
      if (library != library_ || api_version != api_version_ || knobs != knobs_) {
        if (why)
          *why = "the FoundationDB network was started with " + library_ + ", API version " +
                 std::to_string(api_version_) + " and other knobs";
        return Error::invalid_option_value;
      }
      return &api_;
    }
    // A failed setup leaves the process unable to try again (FoundationDB allows one).
    if (setup_failed_) {
      if (why) *why = "the FoundationDB network failed to start earlier in this process";
      return Error::io_error;
    }
    if (api_version < kApiVersionMin || api_version > kHeaderApiVersion) {
      if (why)
        *why = "api_version must be in [" + std::to_string(kApiVersionMin) + ", " +
               std::to_string(kHeaderApiVersion) + "]";
      return Error::invalid_option_value;
    }
    if (!lib_) {
      lib_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!lib_) {
        if (why) *why = std::string("cannot load ") + library + ": " + dlerror();
        return Error::io_error;
      }
      library_ = library;
      if (!load_functions(lib_, api_, why)) return Error::io_error;
    } else if (library != library_) {
      if (why) *why = "libfdb_c was loaded from " + library_;
      return Error::invalid_option_value;
    }
    setup_failed_ = true;  // until the network runs
    if (fdb_error_t e = api_.select_api_version_impl(api_version, kHeaderApiVersion); e != 0) {
      if (why) *why = std::string("fdb_select_api_version: ") + api_.get_error(e);
      return Error::io_error;
    }
    for (const std::string& knob : knobs) {
      if (fdb_error_t e = api_.network_set_option(
              kNetOptionKnob, reinterpret_cast<const std::uint8_t*>(knob.data()),
              static_cast<int>(knob.size()));
          e != 0) {
        if (why) *why = "FoundationDB refused the knob " + knob + ": " + api_.get_error(e);
        return Error::invalid_option_value;
      }
    }
    if (fdb_error_t e = api_.setup_network(); e != 0) {
      if (why) *why = std::string("fdb_setup_network: ") + api_.get_error(e);
      return Error::io_error;
    }
    thread_ = std::thread([api = &api_] {
      if (fdb_error_t e = api->run_network(); e != 0)
        std::fprintf(stderr, "chaise: fdb_run_network: %s\n", api->get_error(e));
    });
    setup_failed_ = false;
    api_version_ = api_version;
    knobs_ = knobs;
    return &api_;
  }

 private:
  std::mutex mu_;
  void* lib_ = nullptr;
  std::string library_;
  int api_version_ = 0;
  std::vector<std::string> knobs_;
  bool setup_failed_ = false;
  bool stop_registered_ = false;
  FdbApi api_{};
  std::thread thread_;
};

Network& network() {
  static Network* n = new Network;
  return *n;
}

}  // namespace

Result<const FdbApi*> start_network(const std::string& library, int api_version,
                                    const std::vector<std::string>& knobs, std::string* why) {
  return network().start(library, api_version, knobs, why);
}

void stop_network_at_exit() { network().stop_at_exit(); }

}  // namespace chaise::storage::fdb
