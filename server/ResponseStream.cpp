//===- ResponseStream.cpp - One request's results, engine to HTTP thread --===//

#include "server/ResponseStream.h"

namespace spanc::server {

ResponseStream::ResponseStream(size_t numChoices, Clock::time_point arrival)
    : choices(numChoices), arrivedAt(arrival), firstTokenAt(arrival) {}

void ResponseStream::appendText(size_t choice, llvm::StringRef piece) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    Clock::time_point now = Clock::now();
    if (!hasFirstToken) {
      hasFirstToken = true;
      firstTokenAt = now;
    }
    Choice &entry = choices[choice];
    if (entry.hasPiece)
      interTokenGaps.push_back(
          std::chrono::duration<double>(now - entry.lastPiece).count());
    entry.hasPiece = true;
    entry.lastPiece = now;
    entry.unread += piece.str();
  }
  news.notify_all();
}

void ResponseStream::finishChoice(size_t choice, ChoiceResult result) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    Choice &entry = choices[choice];
    if (entry.done)
      return;
    entry.done = true;
    entry.result = std::move(result);
    ++numDone;
  }
  news.notify_all();
}

void ResponseStream::take(Update &update, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex);
  auto hasNews = [&] {
    for (const Choice &choice : choices)
      if (!choice.unread.empty() || (choice.done && !choice.reported))
        return true;
    return false;
  };
  news.wait_for(lock, timeout, hasNews);
  update.text.assign(choices.size(), std::string());
  update.finished.assign(choices.size(), false);
  for (size_t index = 0; index < choices.size(); ++index) {
    Choice &choice = choices[index];
    update.text[index].swap(choice.unread);
    if (choice.done && !choice.reported) {
      choice.reported = true;
      update.finished[index] = true;
    }
  }
  update.allDone = numDone == choices.size();
}

const ChoiceResult &ResponseStream::result(size_t choice) const {
  std::lock_guard<std::mutex> lock(mutex);
  return choices[choice].result;
}

std::vector<double> ResponseStream::takeInterTokenGaps() {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<double> gaps;
  gaps.swap(interTokenGaps);
  return gaps;
}

Clock::time_point ResponseStream::firstToken() const {
  std::lock_guard<std::mutex> lock(mutex);
  return firstTokenAt;
}

} // namespace spanc::server
