// Prints the table section of docs/database.md as common/trainshim/schema.def declares it
// (scripts/update-schema-doc puts it between the section's markers).
#include <cstdio>

#include "trainshim/schema.hpp"

int main() {
  const std::string text = trainshim::schema::markdown();
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}
