// The text report laid out for a terminal: names cut at a token with "…", prose wrapped to the
// width, tables kept whole, colour only where asked.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "text/text_layout.hpp"

namespace trainshim::cli {
namespace {

TEST(TextLayout, ANameIsCutAfterATokenAndEndsWithAnEllipsis) {
  const std::string kernel =
      "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
      "CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::"
      "{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast)";
  const std::string cut = cut_to_width(kernel, 46);
  EXPECT_EQ(cut, "void at::native::elementwise_kernel<128, 4,…");
  EXPECT_LE(display_width(cut), 46u);
  // No boundary in the second half of what fits: cut at the width, and the "…" says so.
  EXPECT_EQ(cut_to_width("void at::native::vectorized_elementwise_kernel<4>", 46),
            "void at::native::vectorized_elementwise_kerne…");
  EXPECT_EQ(cut_to_width("at::native::vectorized_elementwise_kernel", 20), "at::native::…");
  EXPECT_EQ(cut_to_width("short_kernel", 46), "short_kernel");
  EXPECT_EQ(cut_to_width(std::string(60, 'a'), 10), std::string(9, 'a') + "…");
  // A boundary only near the start would leave almost nothing: cut at the width instead.
  EXPECT_EQ(cut_to_width("a " + std::string(60, 'b'), 10), "a " + std::string(7, 'b') + "…");
  // Code points, not bytes: "é" is one column.
  EXPECT_EQ(cut_to_width("éééééééééé", 10), "éééééééééé");
  EXPECT_EQ(cut_to_width("ééééééééééé", 10), "ééééééééé…");
}

TEST(TextLayout, ProseWrapsAtSpacesUnderItsIndentTablesAndLongWordsStayWhole) {
  const std::string prose =
      "  * rank 0: Tensor.item() at scripts/examples/train.py:73 in main blocks the host 1.0 times per step (35.2 "
      "ms in all, 76.2 % of step time)\n";
  EXPECT_EQ(fit_to_width(prose, 60), "  * rank 0: Tensor.item() at scripts/examples/train.py:73 in\n"
                                     "      main blocks the host 1.0 times per step (35.2 ms in\n"
                                     "      all, 76.2 % of step time)\n");
  // A number stays with its unit, in brackets too.
  EXPECT_EQ(fit_to_width("  the GPU sits idle 7.0 ms per step after it (13.0 % of the step)\n", 48),
            "  the GPU sits idle 7.0 ms per step after it\n      (13.0 % of the step)\n");
  EXPECT_EQ(fit_to_width("  idle 22.5 % (data loading 14.0 %, sync 8.5 %): 3 steps\n", 46),
            "  idle 22.5 % (data loading 14.0 %, sync\n      8.5 %): 3 steps\n");
  const std::string table = "  Tensor.item()                                  38       1.0    35.2 ms     76.2 %\n";
  EXPECT_EQ(fit_to_width(table, 40), table);
  const std::string path = "      at /a/very/long/path/that/does/not/fit/anywhere/at/all/train.py:73 in main\n";
  EXPECT_EQ(fit_to_width(path, 40),
            "      at\n          /a/very/long/path/that/does/not/fit/anywhere/at/all/train.py:73\n"
            "          in main\n");
  EXPECT_EQ(fit_to_width("short\n\nno newline at the end", 100), "short\n\nno newline at the end");
}

TEST(TextLayout, ColourMarksHeadingsSeveritiesAndTheStraggler) {
  EXPECT_EQ(colorize("What to fix first\n  1. [high] rank 1's input pipeline\n  2. [medium] x\n  3. [low] y\n"),
            "\x1b[1mWhat to fix first\x1b[0m\n  1. \x1b[1;31m[high]\x1b[0m rank 1's input pipeline\n"
            "  2. \x1b[33m[medium]\x1b[0m x\n  3. [low] y\n");
  EXPECT_EQ(colorize("  1      1.2 s     30 ms      72.6 %   <- straggler: costs"),
            "  1      1.2 s     30 ms      72.6 %   \x1b[1;31m<- straggler\x1b[0m: costs");
  EXPECT_EQ(use_color(ColorMode::Always), true);
  EXPECT_EQ(use_color(ColorMode::Never), false);
  // Tests' standard output is no terminal: auto is off.
  EXPECT_EQ(use_color(ColorMode::Auto), false);
}

TEST(TextLayout, TheWidthIsColumnsElseTheTerminalsElseNone) {
  const char* saved = std::getenv("COLUMNS");
  const std::string kept = saved ? saved : "";
  setenv("COLUMNS", "132", 1);
  EXPECT_EQ(output_width(), 132u);
  setenv("COLUMNS", "20", 1);  // narrower than any table: not taken
  EXPECT_EQ(output_width(), 0u);
  setenv("COLUMNS", "wide", 1);
  EXPECT_EQ(output_width(), 0u);
  unsetenv("COLUMNS");
  EXPECT_EQ(output_width(), 0u);  // standard output is no terminal here: a program reads the lines whole
  EXPECT_EQ(fit_to_width("a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d e f g h i j k l m n o", 0),
            "a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d e f g h i j k l m n o");
  if (saved) setenv("COLUMNS", kept.c_str(), 1);
}

}  // namespace
}  // namespace trainshim::cli
