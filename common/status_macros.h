// Status helpers shaped like abseil's later ones (Debian's abseil 20220623
// has absl::Status and absl::StatusOr but no macros for them).
//
//   LS_RETURN_IF_ERROR(DoThing());
//   LS_ASSIGN_OR_RETURN(auto store, Store::Open(options));
#ifndef LOCKSTEP_COMMON_STATUS_MACROS_H_
#define LOCKSTEP_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LS_STATUS_CONCAT_INNER_(a, b) a##b
#define LS_STATUS_CONCAT_(a, b) LS_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing
// function when it is not OK.
#define LS_RETURN_IF_ERROR(expr)                                 \
  do {                                                           \
    ::absl::Status ls_status_ = (expr);                          \
    if (ABSL_PREDICT_FALSE(!ls_status_.ok())) return ls_status_; \
  } while (0)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status from
// the enclosing function, otherwise moves the value into `lhs`, which may be
// a declaration (`auto x`) or an existing variable.
#define LS_ASSIGN_OR_RETURN(lhs, rexpr)                                     \
  LS_ASSIGN_OR_RETURN_IMPL_(LS_STATUS_CONCAT_(ls_statusor_, __LINE__), lhs, \
                            rexpr)

#define LS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) {             \
    return std::move(statusor).status();                \
  }                                                     \
  lhs = std::move(statusor).value()

#endif  // LOCKSTEP_COMMON_STATUS_MACROS_H_
