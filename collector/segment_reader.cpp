#include "segment_reader.hpp"

#include <dirent.h>
#include <signal.h>

#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "trainshim/names.hpp"
#include "trainshim/ring.hpp"

namespace trainshim::collector {

namespace bip = boost::interprocess;

SegmentReader::SegmentReader(const std::string& name) : name_(name) {
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    bip::offset_t size = 0;
    if (!shm.get_size(size) || size < bip::offset_t(sizeof(SegmentHeader)))
      throw std::runtime_error(std::string(header_problem_text(HeaderProblem::TooSmall)));
    region_ = bip::mapped_region(shm, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    throw std::runtime_error(std::string("cannot map: ") + e.what());
  }
  header_ = static_cast<SegmentHeader*>(region_.get_address());
  const HeaderProblem problem = validate_header(*header_, region_.get_size());
  if (problem != HeaderProblem::Ok) throw std::runtime_error(std::string(header_problem_text(problem)));
}

bool SegmentReader::producer_alive() const {
  if (kill(header_->pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(header_->pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close_paren = text.rfind(')');
  if (close_paren == std::string::npos) return true;  // no /proc to ask: trust kill()
  std::istringstream fields(text.substr(close_paren + 2));
  std::string state;
  fields >> state;
  if (state == "Z" || state == "X") return false;
  std::string field;
  for (int i = 4; i < 22; ++i) fields >> field;  // fields 4..21
  uint64_t start_time = 0;
  fields >> start_time;
  return header_->pid_start_time == 0 || start_time == header_->pid_start_time;
}

namespace {

// Bounded: a producer writing as fast as we read must not keep us in one ring forever.
template <class Ring, class Sink, class Valid>
void drain_ring(Ring ring, uint64_t capacity, const Sink& sink, const Valid& valid, bool producer_gone,
                DrainCounts& counts) {
  for (uint64_t n = 0; n < capacity; ++n) {
    typename Ring::Record record;
    const auto status = ring.pop(record);
    if (status == Ring::PopStatus::Record) {
      if (valid(record)) {
        sink(record);
        ++counts.records;
      } else {
        ++counts.malformed;
      }
    } else if (status == Ring::PopStatus::Unpublished && producer_gone) {
      ring.skip_unpublished();
      ++counts.unpublished;
    } else {
      break;
    }
  }
}

}  // namespace

DrainCounts SegmentReader::drain(const std::function<void(const EventRecord&)>& sink, bool producer_gone) {
  DrainCounts counts;
  for (uint32_t i = 0; i < header_->ring_count; ++i)
    drain_ring(ring_of(header_, i), header_->ring_capacity, sink, validate_record, producer_gone, counts);
  return counts;
}

DrainCounts SegmentReader::drain_side(const std::function<void(const SideRecord&)>& sink, bool producer_gone) {
  DrainCounts counts;
  drain_ring(side_ring_of(header_), header_->side_capacity, sink, validate_side_record, producer_gone, counts);
  return counts;
}

uint64_t SegmentReader::dropped_side_full() const { return side_ring_of(header_).dropped(); }

uint64_t SegmentReader::dropped_ring_full() const {
  uint64_t total = 0;
  for (uint32_t i = 0; i < header_->ring_count; ++i) total += ring_of(header_, i).dropped();
  return total;
}

void SegmentReader::unlink() { bip::shared_memory_object::remove(name_.c_str()); }

std::vector<std::string> list_segments(uid_t uid, const std::string& job) {
  std::vector<std::string> names;
  const std::string prefix = segment_prefix(uid, job);
  DIR* dir = opendir(std::string(kShmDir).c_str());
  if (!dir) return names;
  while (dirent* entry = readdir(dir)) {
    std::string_view name(entry->d_name);
    if (name.starts_with(prefix)) names.emplace_back(name);
  }
  closedir(dir);
  return names;
}

}  // namespace trainshim::collector
