// The status page of `accord serve`: the cluster as /status/events streams
// it, a snapshot of the figures /metrics gives each half second and at once
// when a slot is poisoned, heals or fails to. Rates are the change between
// two snapshots over the time between them. No request leaves the page's
// origin.
//
// document.body.dataset.state says where the feed stands: "loading",
// "live" or "lost" (the browser test waits on it).

import { api, errorText, eventData } from "./api.js";

const $ = (id) => document.getElementById(id);
const RETRY_MS = 2000; // a lost feed is asked again after it

let last = null; // the snapshot before, for rates

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

const time = (unixMs) => new Date(unixMs).toLocaleTimeString();

function element(tag, className, text) {
  const made = document.createElement(tag);
  if (className) made.className = className;
  if (text !== undefined) made.textContent = text;
  return made;
}

function sum(slots, field) {
  return slots.reduce((total, slot) => total + slot[field], 0);
}

// Per second between the snapshot before and this one.
function rate(now, field) {
  if (!last || now.uptime_s <= last.uptime_s) return 0;
  return (sum(now.slots, field) - sum(last.slots, field)) / (now.uptime_s - last.uptime_s);
}

function tile(value, label) {
  const view = element("div", "tile");
  view.append(element("b", "", value), element("span", "", label));
  return view;
}

function showRates(now) {
  const tiles = [
    tile(rate(now, "sampled_tokens").toFixed(1), "tokens / s"),
    tile(rate(now, "committed_steps").toFixed(1), "steps committed / s"),
    tile(rate(now, "aborted_steps").toFixed(1), "steps aborted / s"),
    tile(`${now.load.active} / ${now.load.slots}`, "slots generating"),
    tile(String(now.load.queued), "requests queued"),
    tile(String(now.heals.healed + now.heals.failed), "heals"),
  ];
  // Single-rank slots batch their steps and share the KV pool; others show neither.
  if (now.batches?.batches) {
    const mean = (now.batches.steps / now.batches.batches).toFixed(1);
    tiles.push(tile(`${now.batches.batches}`, `batches, width ${mean} mean, ${now.batches.widest} most`));
  }
  if (now.kv_pool && (now.kv_pool.used_bytes || now.kv_pool.budget_bytes)) {
    const budget = now.kv_pool.budget_bytes ? ` of ${bytes(now.kv_pool.budget_bytes)}` : "";
    tiles.push(tile(bytes(now.kv_pool.used_bytes), `KV pool${budget}`));
  }
  $("rates").replaceChildren(...tiles);
}

// A bar per expert, its height the rows it computed on the rank.
function experts(rows) {
  const bars = element("div", "experts");
  const most = Math.max(1, ...rows);
  bars.title = `rows per expert: ${rows.join(", ")}`;
  for (const count of rows) {
    const bar = element("i");
    bar.style.height = `${(100 * count) / most}%`;
    bars.append(bar);
  }
  return bars;
}

function rankView(rank) {
  const view = element("div", rank.lost ? "rank lost" : "rank");
  view.dataset.state = rank.state;
  const where = rank.node ? ` on ${rank.node}` : "";
  const layers = rank.layers ? `layers ${rank.first_layer}–${rank.first_layer + rank.layers - 1}` : "layers: not known";
  view.append(
    element("div", "", `rank ${rank.rank}${where}`),
    element("div", "state", rank.lost ? `${rank.state} (lost)` : rank.state),
    element("div", "", layers),
    element("div", "", `weights ${bytes(rank.weights_bytes)}, KV ${bytes(rank.kv_bytes)}`),
  );
  if (rank.expert_rows.length > 0) {
    view.append(element("div", "", `rows of its ${rank.expert_rows.length} experts`), experts(rank.expert_rows));
  }
  return view;
}

function showSlots(now) {
  const views = now.slots.map((slot, index) => {
    const view = element("div", "slot");
    const head = `slot ${index}: ${slot.committed_steps} steps committed, ${slot.aborted_steps} aborted, ` +
      `${slot.poisoned_steps} poisoned, ${slot.sampled_tokens} tokens`;
    const ranks = element("div", "ranks");
    ranks.append(...slot.ranks.map(rankView));
    view.append(element("div", "slot-head", head), ranks);
    return view;
  });
  $("slots").replaceChildren(...views);
}

function showHeals(now) {
  const result = (heal) => heal.healed
    ? `healed in ${(heal.seconds * 1000).toFixed(1)} ms: ${heal.replaced_ranks} rank(s) restarted, ` +
      `${heal.replayed_tokens} tokens replayed`
    : "failed";
  fillTable("heals", now.heals.recent.toReversed(), (heal) => (heal.healed ? "heal" : "heal failed"),
    (heal) => [time(heal.unix_ms), heal.slot, heal.rank ?? "–", result(heal), heal.cause]);
}

// Fills a table (or says there is nothing) with a row of cells per item.
function fillTable(id, items, rowClass, cells) {
  const rows = items.map((item) => {
    const row = element("tr", rowClass(item));
    for (const text of cells(item)) row.append(element("td", "", String(text)));
    return row;
  });
  $(id).tBodies[0].replaceChildren(...rows);
  $(id).hidden = rows.length === 0;
  $(`no-${id}`).hidden = rows.length > 0;
}

// Every slot's turns into poisoned or healing and back, newest first: a
// poison that a reset cleared between two snapshots still shows.
function showChanges(now) {
  const changes = now.slots.flatMap((slot, index) =>
    slot.changes.map((change, order) => ({ ...change, slot: index, order })));
  changes.sort((a, b) => b.unix_ms - a.unix_ms || b.order - a.order);
  fillTable("changes", changes, (change) => `change ${change.state}`,
    (change) => [time(change.unix_ms), change.slot, change.state, change.lost_rank ?? "–", change.cause]);
}

function show(now) {
  $("model").textContent = now.model;
  $("uptime").textContent = `up ${Math.floor(now.uptime_s)} s`;
  showRates(now);
  showSlots(now);
  showChanges(now);
  showHeals(now);
  last = now;
}

// Reads the feed until it ends; then asks again.
async function follow() {
  try {
    const response = await api("status/events");
    if (!response.ok) throw new Error(await errorText(response));
    document.body.dataset.state = "live";
    $("feed").textContent = "live";
    for await (const data of eventData(response.body)) show(JSON.parse(data));
    throw new Error("the server ended the feed");
  } catch (error) {
    document.body.dataset.state = "lost";
    $("feed").textContent = `feed lost (${error.message}); again in ${RETRY_MS / 1000} s`;
    setTimeout(follow, RETRY_MS);
  }
}

follow();
