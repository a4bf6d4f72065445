// Which Python frames are the user's: what torch.compile generates is not, and the site of a sync
// inside a compiled function is the user's line that called it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "analyse/classifier.hpp"
#include "trainshim/python_files.hpp"

namespace trainshim {
namespace {

// A real inductor output path: code_hash() is "c" + 51 base32 characters, the folder its [1:3].
constexpr const char* kInductorModule =
    "/tmp/torchinductor_alice/fv/cfvyrmqvxe2yeialcpsu7xlbs6xefgd5rsa6mjwycewdrpeq2jca.py";

TEST(PythonFiles, InductorOutputInTheDefaultCacheIsLibrary) {
  EXPECT_TRUE(is_library_python_file(kInductorModule));
  EXPECT_TRUE(is_library_python_file("/var/tmp/torchinductor_bob/triton/0/abc/triton_.py"));
}

TEST(PythonFiles, InductorOutputAnywhereIsRecognisedByItsName) {
  EXPECT_TRUE(is_library_python_file("/scratch/cache/fv/cfvyrmqvxe2yeialcpsu7xlbs6xefgd5rsa6mjwycewdrpeq2jca.py"));
  // The folder must be the hash's second and third characters, the name exactly 52 base32 characters.
  EXPECT_FALSE(is_library_python_file("/scratch/cache/zz/cfvyrmqvxe2yeialcpsu7xlbs6xefgd5rsa6mjwycewdrpeq2jca.py"));
  EXPECT_FALSE(is_library_python_file("/scratch/cache/fv/cfvyrmqvxe2yeialcpsu7xlbs6xefgd5rsa6mjwycewdrpeq2jc.py"));
  EXPECT_FALSE(is_library_python_file("/scratch/cache/fv/cfvyrmqvxe2yeialcpsu7xlbs6xefgd5rsa6mjwycewdrpeq2jc1.py"));
  EXPECT_FALSE(is_library_python_file("/home/alice/project/train.py"));
  EXPECT_FALSE(is_library_python_file("/home/alice/torchinductor/train.py"));
}

TEST(PythonFiles, ConfiguredInductorCacheDirIsLibrary) {
  ASSERT_EQ(setenv("TORCHINDUCTOR_CACHE_DIR", "/data/ind_cache/", 1), 0);
  EXPECT_TRUE(is_library_python_file("/data/ind_cache/aot/kernel.py"));
  EXPECT_FALSE(is_library_python_file("/data/ind_cache_other/train.py"));
  EXPECT_FALSE(is_library_python_file("/data/train.py"));
  ASSERT_EQ(unsetenv("TORCHINDUCTOR_CACHE_DIR"), 0);
  EXPECT_FALSE(is_library_python_file("/data/ind_cache/aot/kernel.py"));
}

TEST(PythonFiles, DynamoGeneratedFramesAreLibrary) {
  EXPECT_TRUE(is_library_python_frame("/home/alice/train.py", "torch_dynamo_resume_in_train_step_at_42"));
  EXPECT_TRUE(is_library_python_frame("<eval_with_key>.3", "forward"));
  EXPECT_FALSE(is_library_python_frame("/home/alice/train.py", "train_step"));
  EXPECT_FALSE(is_library_python_frame("/home/alice/train.py", "my_torch_dynamo_resume_in_x"));
}

TEST(PythonFiles, SiteOfACompiledFunctionIsTheUsersCallingLine) {
  const std::vector<cli::PythonFrameView> frames = {
      {"/usr/lib/python3.11/site-packages/torch/_tensor.py", "item", "", 1},
      {kInductorModule, "call", "", 310},
      {"/usr/lib/python3.11/site-packages/torch/_inductor/output_code.py", "__call__", "", 460},
      {"<eval_with_key>.7", "forward", "", 12},
      {"/home/alice/train.py", "torch_dynamo_resume_in_train_step_at_40", "", 44},
      {"/usr/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", "_fn", "", 655},
      {"/home/alice/train.py", "main", "loss = compiled_step(batch)", 71},
  };
  EXPECT_EQ(cli::top_user_python_frame(frames), 6);
}

}  // namespace
}  // namespace trainshim
