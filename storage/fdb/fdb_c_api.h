// storage/fdb/fdb_c_api.h — internal to storage/fdb/: the part of FoundationDB's C API (API version
// 730, fdb_c.h and fdb_c_options.g.h of FoundationDB 7.3) this engine calls, declared here so that
// nothing of FoundationDB is needed to build Chaise. The library itself (libfdb_c.so) is loaded at
// run time with dlopen (fdb_network.h); FdbApi holds the functions it exports.
//
// Every declaration below is FoundationDB's documented C API (api-c.rst): the names are the C
// names without their `fdb_` prefix, the enum values are those of fdb_c_options.g.h. FDBKeyValue
// is packed to 4 bytes, as fdb_c.h declares it (#pragma pack(4)) since API version 630.
#pragma once

#include <cstdint>

namespace chaise::storage::fdb {

// Opaque handles.
struct FDBFuture;
struct FDBDatabase;
struct FDBTransaction;

using fdb_error_t = int;
using fdb_bool_t = int;

#pragma pack(push, 4)
struct FDBKeyValue {
  const std::uint8_t* key;
  int key_length;
  const std::uint8_t* value;
  int value_length;
};
#pragma pack(pop)
static_assert(sizeof(FDBKeyValue) == 24, "FDBKeyValue is packed to 4 bytes in FoundationDB 7.x");

using FDBCallback = void (*)(FDBFuture* future, void* callback_parameter);

// The API version whose declarations these are: the header version passed to
// fdb_select_api_version_impl.
inline constexpr int kHeaderApiVersion = 730;

// FDBStreamingMode
inline constexpr int kStreamingModeWantAll = -2;
inline constexpr int kStreamingModeExact = 0;

// FDBMutationType
inline constexpr int kMutationAdd = 2;
inline constexpr int kMutationMax = 12;
inline constexpr int kMutationMin = 13;
inline constexpr int kMutationSetVersionstampedKey = 14;
inline constexpr int kMutationSetVersionstampedValue = 15;

// FDBConflictRangeType
inline constexpr int kConflictRangeRead = 0;
inline constexpr int kConflictRangeWrite = 1;

// FDBErrorPredicate
inline constexpr int kPredicateRetryable = 50000;
inline constexpr int kPredicateMaybeCommitted = 50001;

// FDBNetworkOption
inline constexpr int kNetOptionKnob = 40;  // "name=value": a client knob

// FDBDatabaseOption (each sets the transaction option of the same name on every transaction)
inline constexpr int kDbOptionMaxWatches = 20;                 // int64
inline constexpr int kDbOptionTransactionTimeout = 500;        // int64 ms
inline constexpr int kDbOptionTransactionRetryLimit = 501;     // int64
inline constexpr int kDbOptionTransactionMaxRetryDelay = 502;  // int64 ms
inline constexpr int kDbOptionTransactionSizeLimit = 503;      // int64 bytes

// FDBTransactionOption
inline constexpr int kTrOptionTimeout = 500;  // int64 ms (little-endian, as every int option)
inline constexpr int kTrOptionReadServerSideCacheDisable = 508;

// FoundationDB error codes this engine tells apart (error_definitions.h); the rest map through
// error.h's table or the predicates above.
inline constexpr fdb_error_t kErrorOperationCancelled = 1101;
inline constexpr fdb_error_t kErrorTransactionTimedOut = 1031;

// The functions, as loaded from the library (fdb_network.cc fills every one or fails).
struct FdbApi {
  const char* (*get_error)(fdb_error_t code);
  fdb_bool_t (*error_predicate)(int predicate_test, fdb_error_t code);
  fdb_error_t (*select_api_version_impl)(int runtime_version, int header_version);
  fdb_error_t (*network_set_option)(int option, const std::uint8_t* value, int value_length);
  fdb_error_t (*setup_network)();
  fdb_error_t (*run_network)();
  fdb_error_t (*stop_network)();

  fdb_error_t (*create_database)(const char* cluster_file_path, FDBDatabase** out_database);
  void (*database_destroy)(FDBDatabase* d);
  fdb_error_t (*database_set_option)(FDBDatabase* d, int option, const std::uint8_t* value,
                                     int value_length);
  fdb_error_t (*database_create_transaction)(FDBDatabase* d, FDBTransaction** out_transaction);

  void (*future_cancel)(FDBFuture* f);
  void (*future_destroy)(FDBFuture* f);
  fdb_bool_t (*future_is_ready)(FDBFuture* f);
  fdb_error_t (*future_set_callback)(FDBFuture* f, FDBCallback callback, void* callback_parameter);
  fdb_error_t (*future_get_error)(FDBFuture* f);
  fdb_error_t (*future_get_int64)(FDBFuture* f, std::int64_t* out);
  fdb_error_t (*future_get_key)(FDBFuture* f, const std::uint8_t** out_key, int* out_key_length);
  fdb_error_t (*future_get_value)(FDBFuture* f, fdb_bool_t* out_present,
                                  const std::uint8_t** out_value, int* out_value_length);
  fdb_error_t (*future_get_keyvalue_array)(FDBFuture* f, const FDBKeyValue** out_kv, int* out_count,
                                           fdb_bool_t* out_more);

  void (*transaction_destroy)(FDBTransaction* tr);
  fdb_error_t (*transaction_set_option)(FDBTransaction* tr, int option, const std::uint8_t* value,
                                        int value_length);
  FDBFuture* (*transaction_get_read_version)(FDBTransaction* tr);
  void (*transaction_set_read_version)(FDBTransaction* tr, std::int64_t version);
  FDBFuture* (*transaction_get)(FDBTransaction* tr, const std::uint8_t* key_name,
                                int key_name_length, fdb_bool_t snapshot);
  FDBFuture* (*transaction_get_key)(FDBTransaction* tr, const std::uint8_t* key_name,
                                    int key_name_length, fdb_bool_t or_equal, int offset,
                                    fdb_bool_t snapshot);
  FDBFuture* (*transaction_get_range)(FDBTransaction* tr, const std::uint8_t* begin_key_name,
                                      int begin_key_name_length, fdb_bool_t begin_or_equal,
                                      int begin_offset, const std::uint8_t* end_key_name,
                                      int end_key_name_length, fdb_bool_t end_or_equal,
                                      int end_offset, int limit, int target_bytes, int mode,
                                      int iteration, fdb_bool_t snapshot, fdb_bool_t reverse);
  void (*transaction_set)(FDBTransaction* tr, const std::uint8_t* key_name, int key_name_length,
                          const std::uint8_t* value, int value_length);
  void (*transaction_atomic_op)(FDBTransaction* tr, const std::uint8_t* key_name,
                                int key_name_length, const std::uint8_t* param, int param_length,
                                int operation_type);
  void (*transaction_clear)(FDBTransaction* tr, const std::uint8_t* key_name, int key_name_length);
  void (*transaction_clear_range)(FDBTransaction* tr, const std::uint8_t* begin_key_name,
                                  int begin_key_name_length, const std::uint8_t* end_key_name,
                                  int end_key_name_length);
  FDBFuture* (*transaction_watch)(FDBTransaction* tr, const std::uint8_t* key_name,
                                  int key_name_length);
  FDBFuture* (*transaction_commit)(FDBTransaction* tr);
  fdb_error_t (*transaction_get_committed_version)(FDBTransaction* tr, std::int64_t* out_version);
  FDBFuture* (*transaction_get_versionstamp)(FDBTransaction* tr);
  FDBFuture* (*transaction_on_error)(FDBTransaction* tr, fdb_error_t error);
  void (*transaction_reset)(FDBTransaction* tr);
  fdb_error_t (*transaction_add_conflict_range)(FDBTransaction* tr,
                                                const std::uint8_t* begin_key_name,
                                                int begin_key_name_length,
                                                const std::uint8_t* end_key_name,
                                                int end_key_name_length, int type);
  FDBFuture* (*transaction_get_estimated_range_size_bytes)(FDBTransaction* tr,
                                                           const std::uint8_t* begin_key_name,
                                                           int begin_key_name_length,
                                                           const std::uint8_t* end_key_name,
                                                           int end_key_name_length);
};

}  // namespace chaise::storage::fdb
