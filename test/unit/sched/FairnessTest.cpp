//===- FairnessTest.cpp - The admission order across requests -------------===//
//
// sched::FairQueue alone: one request keeps plan order; the request with
// the fewest running calls goes first, the earlier one on a tie; a request
// at its cap or passed over waits; and, simulated step by step, a short
// request that arrives beside a hog of 200 calls is admitted at once.
//
//===----------------------------------------------------------------------===//

#include "runtime/sched/Fairness.h"

#include "llvm/ADT/STLExtras.h"
#include "gtest/gtest.h"

#include <vector>

namespace spanc::sched {
namespace {

TEST(FairQueue, OneRequestKeepsPlanOrder) {
  FairQueue queue;
  for (plan::CallId call = 0; call < 5; ++call)
    queue.push(call, 0);
  queue.pushFront(9, 0);
  std::vector<plan::CallId> order;
  queue.beginPass();
  while (auto next = queue.next()) {
    order.push_back(next->call);
    queue.popFront(next->request);
    queue.countRunning(next->request);
  }
  EXPECT_EQ(order, (std::vector<plan::CallId>{9, 0, 1, 2, 3, 4}));
  EXPECT_TRUE(queue.empty());
}

TEST(FairQueue, TheRequestWithFewestRunningCallsGoesFirst) {
  FairQueue queue;
  for (plan::CallId call = 0; call < 4; ++call)
    queue.push(call, 1);
  queue.push(10, 2);
  queue.push(20, 3);
  queue.beginPass();
  // Ties (none running) go to the earliest request.
  ASSERT_EQ(queue.next()->call, 0u);
  queue.popFront(1);
  queue.countRunning(1);
  // Request 1 runs one call now: 2 and 3 come first, in arrival order.
  EXPECT_EQ(queue.next()->call, 10u);
  queue.popFront(2);
  queue.countRunning(2);
  EXPECT_EQ(queue.next()->call, 20u);
  queue.popFront(3);
  queue.countRunning(3);
  EXPECT_EQ(queue.next()->call, 1u);
  EXPECT_EQ(queue.size(), 3u);
}

TEST(FairQueue, ARequestAtItsCapOrPassedOverWaits) {
  FairnessOptions options;
  options.maxRunningPerRequest = 2;
  FairQueue queue(options);
  for (plan::CallId call = 0; call < 4; ++call)
    queue.push(call, 1);
  queue.push(10, 2);
  queue.beginPass();
  queue.countRunning(1);
  queue.countRunning(1);
  // Request 1 is at its cap: only request 2's call may go.
  ASSERT_EQ(queue.next()->call, 10u);
  // Passed over (no room for it): nothing is left to try in this pass.
  queue.passOver(2);
  EXPECT_FALSE(queue.next());
  // The next pass tries it again; erase() takes a call out anywhere.
  queue.beginPass();
  EXPECT_EQ(queue.next()->call, 0u);
  EXPECT_TRUE(queue.erase(10, 2));
  EXPECT_FALSE(queue.contains(10, 2));
  EXPECT_TRUE(queue.contains(3, 1));
  EXPECT_EQ(queue.size(), 4u);
}

/// A step-by-step simulation of admission: `slots` calls fit at once (the
/// cache's room), each hog call runs `hogSteps` steps, the short call one.
/// Returns the step the short call, arriving at `arrival`, is admitted at.
int shortAdmittedAt(const FairnessOptions &options, int slots, int hogCalls,
                    int hogSteps, int arrival) {
  constexpr RequestTag kHog = 1, kShort = 2;
  constexpr plan::CallId kShortCall = 100000;
  FairQueue queue(options);
  for (int call = 0; call < hogCalls; ++call)
    queue.push(plan::CallId(call), kHog);
  struct Running {
    RequestTag request;
    int stepsLeft;
  };
  std::vector<Running> running;
  for (int step = 0; step < 100000; ++step) {
    if (step == arrival)
      queue.push(kShortCall, kShort);
    queue.beginPass();
    for (const Running &each : running)
      queue.countRunning(each.request);
    while (auto next = queue.next()) {
      if (int(running.size()) >= slots) {
        queue.passOver(next->request); // no room: it waits for a release
        continue;
      }
      queue.popFront(next->request);
      queue.countRunning(next->request);
      if (next->call == kShortCall)
        return step;
      running.push_back({next->request, hogSteps});
    }
    for (Running &each : running)
      --each.stepsLeft;
    llvm::erase_if(running,
                   [](const Running &each) { return each.stepsLeft == 0; });
  }
  return -1;
}

TEST(FairQueue, AShortRequestBesideAHogOf200CallsIsAdmittedAtOnce) {
  // Room for 15 calls, the hog's run 4096 steps each: in plan order the
  // short call would wait for 200 / 15 rounds of them.
  FairnessOptions capped;
  capped.maxRunningPerRequest = 8;
  EXPECT_EQ(shortAdmittedAt(capped, 15, 200, 4096, 3), 3);
  // Without a cap the hog fills every slot, but the short call is the
  // first to take the one its first finished call frees.
  EXPECT_EQ(shortAdmittedAt(FairnessOptions(), 15, 200, 4096, 3), 4096);
  // With room to spare it goes at once, cap or not.
  EXPECT_EQ(shortAdmittedAt(FairnessOptions(), 16, 15, 4096, 3), 3);
}

} // namespace
} // namespace spanc::sched
