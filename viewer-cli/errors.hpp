#pragma once
// The errors the `trainshim` command reports with a message saying what to do, by what caused
// them; main turns each into its exit code (README: "Exit codes of trainshim").
#include <stdexcept>

namespace trainshim::cli {

// The user's mistake: a wrong flag or value, a path that is missing or not what it should be.
// Exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An input that cannot be read to the end: a database damaged or cut short after it was opened.
// Exit code 2, as the README documents for a damaged database.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace trainshim::cli
