// What a session records of its transactions for its report: the one-rank
// Session and the distributed session keep the same record, so their
// reports mean the same.
#pragma once

#include <cstdint>
#include <string>

namespace accord {

struct TransactionRecord {
  std::uint64_t last_epoch = 0;       // the newest transaction, committed or not
  std::uint64_t committed_epoch = 0;  // the newest committed transaction
  std::string last_outcome = "none";  // "committed", "aborted" or "poisoned"
  std::string last_error;             // when not committed
  std::uint64_t aborted_transactions = 0;
  // Successful restorations: aborted steps whose changes were undone, and
  // rollbacks.
  std::uint64_t restoration_generation = 0;

  void committed(std::uint64_t epoch) {
    last_epoch = epoch;
    committed_epoch = epoch;
    last_outcome = "committed";
    last_error.clear();
  }
  // `restored`: the transaction had changed the state, and every change
  // was undone.
  void aborted(std::uint64_t epoch, const std::string& error, bool restored) {
    last_epoch = epoch;
    ++aborted_transactions;
    if (restored) ++restoration_generation;
    last_outcome = "aborted";
    last_error = error;
  }
  void poisoned(std::uint64_t epoch, const std::string& error) {
    last_epoch = epoch;
    last_outcome = "poisoned";
    last_error = error;
  }
};

}  // namespace accord
