// Plots drawn as inline SVG: jobs and audits over time, stake by node, one node's stake over blocks.
// No library: a few rectangles, lines and labels, each with a <title> that says its numbers.
import { clockTime, el, eth, nameOf } from "./util.js";

const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

const tip = (text) => svg("title", {}, text);
const weiToEth = (wei) => Number(BigInt(wei || 0)) / 1e18;

function legend(entries) {
  return el("div", { class: "legend" }, entries.map(([cls, text]) => el("span", {}, el("i", { class: "swatch " + cls }), text)));
}

// Jobs batched and audits started per time bucket (block ranges from the summary), slashes marked.
export function activityPlot(summary) {
  const { edges, jobs, audits, slashes } = summary.series;
  const times = summary.block_times || {};
  const width = 640, height = 190, left = 34, bottom = 34, top = 12;
  const n = jobs.length, peak = Math.max(1, ...jobs, ...audits);
  const step = (width - left - 8) / Math.max(n, 1), bar = Math.max(2, step * 0.38);
  const y = (v) => top + (height - top - bottom) * (1 - v / peak);
  const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "plot", role: "img", "aria-label": "jobs and audits over time", "data-plot": "activity" });
  plot.append(svg("line", { x1: left, y1: y(0), x2: width - 4, y2: y(0), class: "axis" }),
              svg("text", { x: left - 6, y: y(peak) + 4, class: "tick", "text-anchor": "end" }, peak),
              svg("text", { x: left - 6, y: y(0), class: "tick", "text-anchor": "end" }, 0));
  for (let i = 0; i < n; i++) {
    const x = left + i * step + 2;
    const range = `blocks ${edges[i]}–${edges[i + 1] - 1}`;
    plot.append(svg("rect", { x, y: y(jobs[i]), width: bar, height: y(0) - y(jobs[i]), class: "bar-jobs" }, tip(`${range}: ${jobs[i]} jobs batched`)),
                svg("rect", { x: x + bar, y: y(audits[i]), width: bar, height: y(0) - y(audits[i]), class: "bar-audits" }, tip(`${range}: ${audits[i]} audits started`)));
    if (slashes[i]) plot.append(svg("circle", { cx: x + bar, cy: top + 4, r: 3 + Math.min(slashes[i], 5), class: "dot-slash" }, tip(`${range}: ${slashes[i]} slashes`)));
  }
  const labelled = [0, Math.floor(n / 2), n].filter((v, i, all) => all.indexOf(v) === i);
  for (const i of labelled) {
    const blockNumber = i < n ? edges[i] : summary.head;
    const t = times[blockNumber];
    const anchor = i === 0 ? "start" : i === n ? "end" : "middle";
    const x = i === n ? width - 4 : left + i * step + 2;
    plot.append(svg("text", { x, y: height - 18, class: "tick", "text-anchor": anchor }, "block " + blockNumber),
                svg("text", { x, y: height - 5, class: "tick", "text-anchor": anchor }, t ? clockTime(t) : ""));
  }
  return el("figure", {}, plot, legend([["bar-jobs", "jobs batched"], ["bar-audits", "audits started"], ["dot-slash", "slashes"]]));
}

// Each node's stake now, and what was slashed from it; the dashed line is the minimum stake to be drawn.
export function stakePlot(stake, minStakeWei) {
  const width = 640, row = 22, left = 150, right = 120;
  const height = stake.length * row + 16;
  const peak = Math.max(weiToEth(minStakeWei), ...stake.map((s) => weiToEth(s.stake_wei) + weiToEth(s.slashed_wei)), 1e-9);
  const scale = (v) => (width - left - right) * v / peak;
  const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "plot", role: "img", "aria-label": "stake by node", "data-plot": "stake" });
  stake.forEach((s, i) => {
    const y = 6 + i * row, kept = weiToEth(s.stake_wei), lost = weiToEth(s.slashed_wei);
    const link = svg("a", { href: "#/node/" + s.address.toLowerCase() }, svg("text", { x: left - 8, y: y + 13, class: "label", "text-anchor": "end" }, nameOf(s.address)));
    plot.append(link,
      svg("rect", { x: left, y, width: Math.max(scale(kept), kept ? 1 : 0), height: row - 7, class: s.active ? "bar-stake" : "bar-stake inactive" }, tip(`${nameOf(s.address)}: ${eth(s.stake_wei)} at stake`)),
      svg("rect", { x: left + scale(kept), y, width: scale(lost), height: row - 7, class: "bar-slashed" }, tip(`${nameOf(s.address)}: ${eth(s.slashed_wei)} slashed`)),
      svg("text", { x: left + scale(kept + lost) + 6, y: y + 13, class: "tick" }, eth(s.stake_wei) + (lost ? ` (−${eth(s.slashed_wei)})` : "")));
  });
  const x = left + scale(weiToEth(minStakeWei));
  plot.append(svg("line", { x1: x, y1: 0, x2: x, y2: height, class: "min-stake" }, tip("minimum stake to be drawn: " + eth(minStakeWei))));
  return el("figure", {}, plot, legend([["bar-stake", "at stake"], ["bar-stake inactive", "below the minimum (not drawn)"], ["bar-slashed", "slashed"], ["min-stake", "minimum stake"]]));
}

// One node's stake after every Registry event, as a step line over blocks.
export function stakeHistoryPlot(history, head) {
  const points = history.filter((h) => h.stake_wei !== null && h.stake_wei !== undefined);
  if (!points.length) return el("p", { class: "muted" }, "no stake events");
  const width = 640, height = 120, left = 70, bottom = 22, top = 10;
  const first = points[0].block, last = Math.max(head || first, points[points.length - 1].block, first + 1);
  const peak = Math.max(...points.map((p) => weiToEth(p.stake_wei)), 1e-9);
  const x = (b) => left + (width - left - 10) * (b - first) / (last - first);
  const y = (v) => top + (height - top - bottom) * (1 - v / peak);
  let path = "";
  points.forEach((p, i) => {
    const v = weiToEth(p.stake_wei);
    path += i === 0 ? `M${x(p.block)},${y(v)}` : `H${x(p.block)}V${y(v)}`;
  });
  path += `H${x(last)}`;
  const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "plot", role: "img", "aria-label": "stake over blocks", "data-plot": "stake-history" },
    svg("line", { x1: left, y1: y(0), x2: width - 10, y2: y(0), class: "axis" }),
    svg("text", { x: left - 6, y: y(peak) + 4, class: "tick", "text-anchor": "end" }, peak.toLocaleString(undefined, { maximumFractionDigits: 4 }) + " ETH"),
    svg("text", { x: left - 6, y: y(0), class: "tick", "text-anchor": "end" }, "0"),
    svg("path", { d: path, class: "line-stake" }),
    svg("text", { x: left, y: height - 4, class: "tick" }, "block " + first),
    svg("text", { x: width - 10, y: height - 4, class: "tick", "text-anchor": "end" }, "block " + last));
  for (const p of points) {
    plot.append(svg("circle", { cx: x(p.block), cy: y(weiToEth(p.stake_wei)), r: 3.5, class: p.event === "Slashed" ? "dot-slash" : "dot-stake" },
                    tip(`block ${p.block}: ${p.event}, stake ${eth(p.stake_wei)}`)));
  }
  return el("figure", {}, plot);
}
