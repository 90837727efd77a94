#include "runtime/rank/prompt_cache_recovery.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "runtime/rank/prompt_cache.hpp"

namespace accord {

namespace fs = std::filesystem;

namespace {

// What one rank folder holds, read once under its lock.
struct RankView {
  fs::path dir;
  std::optional<std::string> current;
  bool current_unreadable = false;
  std::set<std::string> published;  // under generations/
  std::set<std::string> staged;     // .staging-NAME
};

using Views = std::map<int, RankView>;

// The rank numbers of root's rank-NN folders (links are not rank folders).
std::vector<int> rank_numbers(Env& env, const fs::path& root) {
  std::vector<int> ranks;
  for (const std::string& name : env.entries(root)) {
    if (!name.starts_with("rank-") || name.size() > 9) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const int rank = std::stoi(digits);
    if (rank_folder(root, rank).filename() == name && env.type_of(root / name) == FileType::folder) {
      ranks.push_back(rank);
    }
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

RankView view_of(Env& env, const fs::path& dir) {
  RankView view{dir, std::nullopt, false, {}, {}};
  if (auto current = read_current(dir, env)) {
    view.current = *current;
  } else {
    view.current_unreadable = true;
  }
  for (const std::string& name : env.entries(generations_folder(dir))) {
    if (is_generation_name(name) && env.type_of(generation_folder(dir, name)) == FileType::folder) {
      view.published.insert(name);
    }
  }
  for (const std::string& entry : env.entries(dir)) {
    const std::string name = staged_generation(entry);
    if (!name.empty() && env.type_of(dir / entry) == FileType::folder) view.staged.insert(name);
  }
  return view;
}

const RankView* find_view(const Views& views, int rank) {
  auto it = views.find(rank);
  return it == views.end() ? nullptr : &it->second;
}

// Whether the cache needs no recovery: rank 0's live generation is named
// and held by every rank of its save. A live generation that exists but
// cannot be read is damage, not a mixed publication: the load refuses it.
bool is_consistent(Env& env, const fs::path& root, const Views& views) {
  const bool any_current = std::any_of(views.begin(), views.end(),
                                       [](const auto& v) { return v.second.current || v.second.current_unreadable; });
  if (!any_current) return true;  // an empty cache
  const RankView* first = find_view(views, 0);
  if (first == nullptr || !first->current) return first != nullptr && first->current_unreadable;
  const std::string& name = *first->current;
  if (!first->published.contains(name)) return false;
  auto live = read_generation(root, generation_folder(first->dir, name), env);
  if (!live) return true;
  for (int r = 1; r < live->manifest.topology.ranks; ++r) {
    const RankView* view = find_view(views, r);
    if (view == nullptr || view->current != name || !view->published.contains(name)) return false;
  }
  return true;
}

// Whether every rank of generation `name`'s save holds it whole; the
// save's rank count when it does.
std::optional<int> whole_everywhere(Env& env, const fs::path& root, const Views& views, const std::string& name) {
  std::optional<int> ranks;
  for (int r = 0; !ranks || r < *ranks; ++r) {
    const RankView* view = find_view(views, r);
    if (view == nullptr || !(view->published.contains(name) || view->staged.contains(name))) return std::nullopt;
    const fs::path folder =
        view->published.contains(name) ? generation_folder(view->dir, name) : staging_folder(view->dir, name);
    auto generation = read_generation(root, folder, env);
    if (!generation || !read_shard(*generation)) return std::nullopt;
    const PromptCacheTopology& topology = generation->manifest.topology;
    if (!ranks) ranks = topology.ranks;
    if (topology.ranks != *ranks || topology.rank != r) return std::nullopt;
  }
  return ranks;
}

struct Choice {
  std::string name;
  int ranks = 0;
};

// The generation to make live, by the rule in the header.
std::optional<Choice> choose_live(Env& env, const fs::path& root, const Views& views) {
  std::set<std::string> names;
  std::map<std::string, int> named_by;
  for (const auto& [rank, view] : views) {
    names.insert(view.published.begin(), view.published.end());
    if (view.current) ++named_by[*view.current];
  }
  std::optional<Choice> best;
  int best_votes = -1;
  const RankView* first = find_view(views, 0);
  for (const std::string& name : names) {  // ascending, so ties go to the greatest name
    auto ranks = whole_everywhere(env, root, views, name);
    if (!ranks) continue;
    const int votes = first != nullptr && first->current == name ? static_cast<int>(views.size()) + 1 : named_by[name];
    if (votes >= best_votes) {
      best = Choice{name, *ranks};
      best_votes = votes;
    }
  }
  return best;
}

Status make_live(Env& env, const Views& views, const Choice& choice) {
  for (int r = 0; r < choice.ranks; ++r) {
    const RankView& view = views.at(r);
    if (!view.published.contains(choice.name)) {
      const fs::path target = generation_folder(view.dir, choice.name);
      if (Status ok = env.rename(staging_folder(view.dir, choice.name), target); !ok) return ok;
      if (Status ok = env.sync_folder(generations_folder(view.dir)); !ok) return ok;
    }
    if (view.current != choice.name) {
      if (Status ok = replace_file_atomically(env, current_file(view.dir), choice.name + "\n"); !ok) return ok;
    }
  }
  return {};
}

Status remove_every_current(Env& env, const Views& views) {
  for (const auto& [rank, view] : views) {
    if (Status ok = env.remove(current_file(view.dir)); !ok) return ok;
    if (Status ok = env.sync_folder(view.dir); !ok) return ok;
  }
  return {};
}

std::string describe(const Views& views) {
  std::string text;
  for (const auto& [rank, view] : views) {
    if (!text.empty()) text += ", ";
    text += view.dir.filename().string() + " on " +
            (view.current              ? *view.current
             : view.current_unreadable ? "an unreadable CURRENT"
                                       : "none");
  }
  return text;
}

}  // namespace

Result<PromptCacheRecovery> recover_prompt_cache(const fs::path& root, Env& env) {
  std::vector<std::unique_ptr<EnvLock>> locks;
  Views views;
  for (int rank : rank_numbers(env, root)) {
    const fs::path dir = rank_folder(root, rank);
    auto lock = env.try_lock(lock_file(dir));
    if (!lock) return lock.error();
    if (!*lock) return PromptCacheRecovery{RecoveryAction::busy, "", "a writer holds " + lock_file(dir).string()};
    locks.push_back(std::move(*lock));
    views.emplace(rank, view_of(env, dir));
  }
  // A killed writer's half-written CURRENT; no writer is running now.
  for (const auto& [rank, view] : views) {
    fs::path partial = current_file(view.dir);
    partial += ".partial";  // replace_file_atomically's temporary
    (void)env.remove(partial);
  }
  if (is_consistent(env, root, views)) return PromptCacheRecovery{};
  const std::string found = "the ranks were on different generations (" + describe(views) + ")";
  if (auto choice = choose_live(env, root, views)) {
    if (Status ok = make_live(env, views, *choice); !ok) return ok.error();
    return PromptCacheRecovery{RecoveryAction::healed, choice->name, found + "; every rank now names " + choice->name};
  }
  if (Status ok = remove_every_current(env, views); !ok) return ok.error();
  return PromptCacheRecovery{RecoveryAction::cleared, "",
                             found + "; none was whole on every rank, so the cache is now empty"};
}

}  // namespace accord
