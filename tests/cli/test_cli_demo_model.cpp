// The built-in demo model (models/orchid-demo, found beside the binary's folder): run and chat
// without -m use it, and its answers are the trained model's; an ORCHID_DEMO_MODEL that holds no
// model is a clear error.
#include <gtest/gtest.h>

#include "../test_util.h"

namespace orchid::test {
namespace {

TEST(CliDemoModel, RunWithoutModelAnswersFromTheDemoModel) {
  auto r = run_orchid("run -p " + shell_quote("What does orchid mean?") + " -n 40 --greedy");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  // Trained on "What does X mean?" → "\"X\" is a <part of speech> meaning …": the greedy answer
  // names the word and defines it (a random model would babble).
  EXPECT_TRUE(contains(r.output, "\"orchid\" is a noun meaning")) << r.output;
}

TEST(CliDemoModel, ChatWithoutModelTakesTurns) {
  auto r = run_command("printf 'What does tree mean?\\n/exit\\n' | " + shell_quote(ORCHID_BINARY) +
                       " chat -n 24");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  EXPECT_TRUE(contains(r.output, "\"tree\" is a")) << r.output;
}

TEST(CliDemoModel, MissingDemoModelIsAClearError) {
  ScratchDir empty("no_demo_model");
  auto r = run_command("ORCHID_DEMO_MODEL=" + shell_quote(empty.str()) + " " +
                       shell_quote(ORCHID_BINARY) + " run -p hi");
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.describe();
  EXPECT_TRUE(contains(r.output, "demo model")) << r.output;
  EXPECT_TRUE(contains(r.output, "-m DIR")) << r.output;
}

}  // namespace
}  // namespace orchid::test
