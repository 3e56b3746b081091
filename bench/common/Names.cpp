//===- Names.cpp - Seeded person names for planted facts and needles ------===//

#include "bench/common/Names.h"

#include <cassert>
#include <iterator>

namespace spanc::bench {

namespace {

const char *const kFirstNames[] = {
    "Alice",  "Bruno",  "Clara",   "Daniel", "Elena", "Felix",  "Grace",
    "Hugo",   "Irene",  "Jonas",   "Karen",  "Lucas", "Marta",  "Nathan",
    "Olivia", "Pablo",  "Rachel",  "Simon",  "Tara",  "Victor", "Wendy",
    "Xavier", "Yvonne", "Zachary", "Ingrid", "Oscar", "Helena", "Martin",
    "Sofia",  "Peter",  "Laura",   "Edgar",  "Nora",  "Tobias", "Vera",
    "George", "Diana",  "Rupert",  "Agnes",  "Milan"};
const char *const kLastNames[] = {
    "Abbott",    "Barker",  "Castillo",  "Dawson",   "Eriksen",  "Fischer",
    "Garner",    "Hartley", "Iverson",   "Jenkins",  "Keller",   "Lindqvist",
    "Moreau",    "Novak",   "Ortega",    "Petrov",   "Quinn",    "Romano",
    "Sinclair",  "Tanaka",  "Ulrich",    "Vargas",   "Whitaker", "Young",
    "Zeller",    "Brennan", "Cortez",    "Dumont",   "Foster",   "Haddad",
    "Kowalski",  "Larsen",  "Mendoza",   "Nakamura", "Okafor",   "Pereira",
    "Rasmussen", "Schmidt", "Takahashi", "Weber"};

/// A partial Fisher-Yates shuffle: the first `count` of a random order.
std::vector<size_t> pick(std::mt19937_64 &random, size_t size, size_t count) {
  std::vector<size_t> order(size);
  for (size_t i = 0; i < size; ++i)
    order[i] = i;
  for (size_t i = 0; i < count; ++i)
    std::swap(order[i], order[i + random() % (size - i)]);
  order.resize(count);
  return order;
}

} // namespace

size_t maxDistinctNames() {
  return std::min(std::size(kFirstNames), std::size(kLastNames));
}

std::vector<std::string> personNames(std::mt19937_64 &random, size_t count) {
  assert(count <= maxDistinctNames() && "more names than the lists hold");
  std::vector<size_t> firsts = pick(random, std::size(kFirstNames), count);
  std::vector<size_t> lasts = pick(random, std::size(kLastNames), count);
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i)
    names.push_back(std::string(kFirstNames[firsts[i]]) + " " +
                    kLastNames[lasts[i]]);
  return names;
}

} // namespace spanc::bench
