#include "server/job_events.h"

#include <vector>

#include "gtest/gtest.h"

namespace lockstep::server {
namespace {

lockstep::v1::JobEvent Event(int i, bool final = false) {
  lockstep::v1::JobEvent e;
  e.set_message("event " + std::to_string(i));
  e.set_final(final);
  return e;
}

TEST(WatchQueueTest, ASlowClientHoldsBoundedEventsAndGetsTheLatest) {
  WatchQueue q(/*max_pending=*/4);
  EXPECT_TRUE(q.Push(Event(0)));  // write 0 starts; the client never reads
  for (int i = 1; i <= 100000; ++i) EXPECT_FALSE(q.Push(Event(i)));
  EXPECT_EQ(q.pending(), 4u);
  EXPECT_EQ(q.coalesced(), 100000 - 4);
  EXPECT_FALSE(q.Push(Event(100001, /*final=*/true)));
  EXPECT_FALSE(q.Push(Event(100002)));  // nothing after the final event
  std::vector<std::string> written;
  bool was_final = false;
  written.push_back(q.Front().message());
  while (q.Pop(&was_final)) written.push_back(q.Front().message());
  EXPECT_TRUE(was_final);
  ASSERT_EQ(written.size(), 5u);
  EXPECT_EQ(written[0], "event 0");
  EXPECT_EQ(written[1], "event 1");
  EXPECT_EQ(written.back(), "event 100001");  // the final one, never dropped
}

TEST(WatchQueueTest, AFastClientSeesEveryEvent) {
  WatchQueue q(/*max_pending=*/2);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(q.Push(Event(i, i == 9)));
    EXPECT_EQ(q.Front().message(), "event " + std::to_string(i));
    bool was_final = false;
    EXPECT_FALSE(q.Pop(&was_final));
    EXPECT_EQ(was_final, i == 9);
  }
  EXPECT_EQ(q.coalesced(), 0);
}

TEST(JobEventsTest, WatchersGetTheirJobsEventsAndTheHookTheFinalOne) {
  JobEvents events;
  std::vector<std::string> seen;
  int finals = 0;
  events.SetFinalHook([&](const lockstep::v1::Job&) { ++finals; });
  const int64_t token = events.Watch(
      "job-a", Event(0),
      [&](const lockstep::v1::JobEvent& e) { seen.push_back(e.message()); });
  JobEventList list;
  list.emplace_back("job-b", Event(1));
  list.emplace_back("job-a", Event(2));
  list.emplace_back("job-a", Event(3, true));
  events.Publish(list);
  EXPECT_EQ(seen, (std::vector<std::string>{"event 0", "event 2", "event 3"}));
  EXPECT_EQ(finals, 1);
  events.Unwatch(token);
  events.Publish(list);
  EXPECT_EQ(seen.size(), 3u);
}

}  // namespace
}  // namespace lockstep::server
