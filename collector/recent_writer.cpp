#include "recent_writer.hpp"

#include <algorithm>

namespace trainshim::collector {

void RecentWriter::track(int64_t process_id, const RecentWindow& window) {
  Process& p = processes_[process_id];
  p.capacity = window.capacity();
  p.queued_up_to = window.pushed();
  for (const int64_t rowid : database_.recent_event_rowids(process_id)) p.note_row(rowid);
}

void RecentWriter::Process::note_row(int64_t rowid) {
  if (!in_table.empty() && in_table.back().last + 1 == rowid) ++in_table.back().last;
  else in_table.push_back({rowid, rowid});
  ++rows_in_table;
}

void RecentWriter::queue(int64_t process_id, const RecentWindow& window) {
  const auto it = processes_.find(process_id);
  if (it == processes_.end()) return;
  Process& p = it->second;
  const uint64_t fresh = std::min<uint64_t>(window.pushed() - p.queued_up_to, window.size());
  p.queued_up_to = window.pushed();
  if (fresh == 0) return;
  p.queue.erase(p.queue.begin(), p.queue.begin() + std::ptrdiff_t(p.next));
  p.next = 0;
  uint64_t skip = window.size() - fresh;
  window.for_each([&](const StoredEvent& e) {
    if (skip) --skip;
    else p.queue.push_back(e);
  });
  // Queued rows older than the window's capacity would only be replaced by newer ones.
  if (p.queue.size() - p.next > p.capacity) p.next = p.queue.size() - p.capacity;
}

void RecentWriter::finish(int64_t process_id) {
  const auto it = processes_.find(process_id);
  if (it == processes_.end()) return;
  it->second.finished = true;
  if (it->second.next == it->second.queue.size()) processes_.erase(it);
}

std::size_t RecentWriter::queued() const {
  std::size_t n = 0;
  for (const auto& [id, p] : processes_) n += p.queue.size() - p.next;
  return n;
}

void RecentWriter::forget_oldest(int64_t process_id, Process& p, uint64_t count) {
  while (count > 0 && !p.in_table.empty()) {
    Rows& oldest = p.in_table.front();
    const int64_t last = std::min<int64_t>(oldest.last, oldest.first + int64_t(count) - 1);
    database_.forget_recent_events(process_id, oldest.first, last);
    const uint64_t gone = uint64_t(last - oldest.first + 1);
    count -= gone;
    p.rows_in_table -= gone;
    if (last == oldest.last) p.in_table.pop_front();
    else oldest.first = last + 1;
  }
}

std::size_t RecentWriter::write(std::size_t budget) {
  std::size_t written = 0;
  for (auto it = processes_.begin(); it != processes_.end() && written < budget;) {
    Process& p = it->second;
    const std::size_t n = std::min(budget - written, p.queue.size() - p.next);
    if (n > 0) {
      if (p.rows_in_table + n > p.capacity) forget_oldest(it->first, p, p.rows_in_table + n - p.capacity);
      for (std::size_t i = p.next; i < p.next + n; ++i) p.note_row(database_.add_recent_event(it->first, p.queue[i]));
      p.next += n;
      written += n;
    }
    if (p.next == p.queue.size()) {
      p.queue.clear();
      p.next = 0;
      if (p.finished) {
        it = processes_.erase(it);
        continue;
      }
    }
    ++it;
  }
  return written;
}

}  // namespace trainshim::collector
