// Mirrors torch/csrc/distributed/c10d/FileStore.cpp and PrefixStore.cpp (libtorch_cpu): the
// store the ranks of one machine exchange NCCL unique ids through. Real torch's env:// rendezvous
// uses a TCPStore on MASTER_ADDR:MASTER_PORT; the stand-in keeps the same keys in a folder, one
// file per key, written whole and renamed into place so that a reader never sees half a value.
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <thread>

#include "torchlike/c10d.h"

namespace c10d {
namespace {

// Keys hold '/' (PrefixStore) and ':' (p2p pairs): one flat file name per key.
std::string fileName(const std::string& key) {
  std::string name;
  for (const char c : key) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') name += c;
    else name += '%' + std::to_string(static_cast<unsigned char>(c)) + '%';
  }
  return name;
}

}  // namespace

FileStore::FileStore(std::string path, int numWorkers) : path_(std::move(path)) {
  (void)numWorkers;
  if (mkdir(path_.c_str(), 0700) != 0 && errno != EEXIST) throw c10::Error("FileStore: cannot create " + path_);
}

void FileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  const std::string target = path_ + "/" + fileName(key);
  const std::string scratch = target + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(scratch, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
    if (!out) throw c10::Error("FileStore: cannot write " + scratch);
  }
  if (std::rename(scratch.c_str(), target.c_str()) != 0) throw c10::Error("FileStore: cannot write " + target);
}

// get waits for the key, as Store::get does, up to the store's timeout.
std::vector<uint8_t> FileStore::get(const std::string& key) {
  const std::string target = path_ + "/" + fileName(key);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    std::ifstream in(target, std::ios::binary);
    if (in) return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (std::chrono::steady_clock::now() - start > timeout_)
      throw c10::Error("Timeout waiting for key: " + key + " in FileStore " + path_);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : prefix_(std::move(prefix)), store_(std::move(store)) {}

void PrefixStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  store_->set(prefix_ + "/" + key, value);
}

std::vector<uint8_t> PrefixStore::get(const std::string& key) { return store_->get(prefix_ + "/" + key); }

}  // namespace c10d
