// ev-nav's web page: click a start and a destination, see the planned, best-guess and shortest
// routes with their figures, record what the trip cost, look at what the fleet has learned.
// Plain JavaScript on the server's own JSON API (see /docs); Leaflet is served by ev-nav.
"use strict";

const ROUTE_STYLE = {
  // drawn in this order, each narrower than the one before, so shared roads show every route
  "planned": { color: "#d62728", weight: 11 },
  "best guess": { color: "#1f77b4", weight: 7 },
  "shortest": { color: "#2ca02c", weight: 3 },
};
const TABLE_COLOR = { "fastest": "#9467bd", "safe": "#ff7f0e" };
const VIRIDIS = ["#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c", "#22a884",
  "#44bf70", "#7ad151", "#bddf26", "#fde725"];
const PLASMA = ["#0d0887", "#41049d", "#6a00a8", "#8f0da4", "#b12a90", "#cc4778", "#e16462",
  "#f2844b", "#fca636", "#fcce25", "#f0f921"];
const NO_DATA = "#b8b8b8";
// roads flagged as changed: the magenta of `ev-nav map` (ev_nav/viz/maps.py CHANGE_COLOR)
const CHANGE_COLOR = "#e6007e";

const $ = (id) => document.getElementById(id);
const ui = {
  map: null, network: null, layers: null, scale: null, routes: [], markers: [], viaMarkers: [],
  changes: null,
  origin: null, goal: null, trip: null, health: null, busy: false,
};

// ------------------------------------------------------------------ HTTP
function authHeaders() {
  const token = $("token").value.trim();
  return token ? { "Authorization": "Bearer " + token } : {};
}

async function api(method, path, body) {
  const init = { method, headers: { "Accept": "application/json", ...authHeaders() } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (err) {
    throw new Error("the server cannot be reached (" + err.message + ")");
  }
  const text = await resp.text();
  let doc = null;
  try { doc = text ? JSON.parse(text) : null; } catch (err) { doc = null; }
  if (!resp.ok) {
    throw new Error((doc && doc.error) || ("HTTP " + resp.status));
  }
  return doc;
}

function status(text, kind) {
  const el = $("status");
  el.textContent = text;
  el.className = kind || "";
}

// ------------------------------------------------------------------ colours
function hexToRgb(h) { return [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)); }

function rampColor(ramp, t) {
  const x = Math.min(Math.max(t, 0), 1) * (ramp.length - 1);
  const i = Math.min(Math.floor(x), ramp.length - 2);
  const a = hexToRgb(ramp[i]), b = hexToRgb(ramp[i + 1]), f = x - i;
  return "#" + a.map((v, k) => Math.round(v + f * (b[k] - v)).toString(16).padStart(2, "0"))
    .join("");
}

function percentile(sorted, p) {
  if (!sorted.length) return NaN;
  const x = (sorted.length - 1) * p, i = Math.floor(x), f = x - i;
  return i + 1 < sorted.length ? sorted[i] * (1 - f) + sorted[i + 1] * f : sorted[i];
}

function fmt(x) {
  if (!isFinite(x)) return "n/a";
  const a = Math.abs(x);
  if (a >= 1000) return Math.round(x).toLocaleString("en");
  if (Number.isInteger(x)) return String(x);
  if (a >= 10) return x.toFixed(1);
  return x.toPrecision(3);
}

// The scale of a layer: 2nd–98th percentile (ends marked ≤/≥ when values lie beyond), visits on
// a log scale from 1 to the true maximum (never driven: grey).
function makeScale(name, features) {
  const values = features.map((f) => f.properties[name]);
  if (name === "visits") {
    const max = Math.max(2, ...values);
    return {
      name, log: true, lo: 1, hi: max, ramp: PLASMA, below: false, above: false,
      color: (v) => (v > 0 ? rampColor(PLASMA, Math.log(v) / Math.log(max)) : NO_DATA),
    };
  }
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  let lo = percentile(sorted, 0.02), hi = percentile(sorted, 0.98);
  if (!(hi > lo)) { lo -= 1; hi += 1; }
  return {
    name, log: false, lo, hi, ramp: VIRIDIS,
    below: sorted[0] < lo, above: sorted[sorted.length - 1] > hi,
    color: (v) => (Number.isFinite(v) ? rampColor(VIRIDIS, (v - lo) / (hi - lo)) : NO_DATA),
  };
}

function drawLegend(scale, title) {
  const stops = scale.ramp.map((c, i) => c + " " + (100 * i / (scale.ramp.length - 1)) + "%");
  const ticks = [0, 0.5, 1].map((t) => (scale.log
    ? Math.exp(Math.log(scale.lo) + t * (Math.log(scale.hi) - Math.log(scale.lo)))
    : scale.lo + t * (scale.hi - scale.lo)));
  const text = ticks.map(fmt);
  if (scale.below) text[0] = "≤ " + text[0];
  if (scale.above) text[2] = "≥ " + text[2];
  $("legend").innerHTML = "";
  const head = document.createElement("div");
  head.textContent = title + (scale.log ? " (log scale)" : "");
  const bar = document.createElement("div");
  bar.className = "bar";
  bar.style.background = "linear-gradient(to right, " + stops.join(", ") + ")";
  const row = document.createElement("div");
  row.className = "ticks";
  text.forEach((t, i) => {
    const s = document.createElement("span");
    s.style.left = (50 * i) + "%";
    s.textContent = t;
    row.appendChild(s);
  });
  $("legend").append(head, bar, row);
}

// ------------------------------------------------------------------ learned layers
async function loadLayers() {
  const doc = await api("GET", "/api/layers");
  ui.layers = doc;
  const select = $("layer-select");
  const current = select.value || "wh_per_km";
  select.innerHTML = "";
  for (const [key, title] of Object.entries(doc.layers)) {
    const opt = document.createElement("option");
    opt.value = key;
    opt.textContent = title;
    select.appendChild(opt);
  }
  select.value = current in doc.layers ? current : "wh_per_km";
  if (ui.network) ui.network.remove();
  ui.network = L.geoJSON(doc, {
    interactive: false, // clicks go to the map: they pick the start and the destination
    style: () => ({ color: NO_DATA, weight: 3, opacity: 0.9 }),
  }).addTo(ui.map);
  ui.network.bringToBack();
  colourLayer();
  await loadChanges();
  return doc;
}

// ------------------------------------------------------------------ roads flagged as changed
// The flagged roads (GET /api/changes) drawn over the network in magenta, each with its evidence
// in a tooltip. Their lines are the segments' own in the layers just loaded (feature i is
// segment i), so this needs no geometry of its own.
function changeTip(r) {
  // built as text nodes, not HTML: the road class comes from the map data
  const sign = (x) => (x >= 0 ? "+" : "");
  const lines = [
    "segment " + r.segment + " (" + r.road + ", " + fmt(r.length_m) + " m)",
    "flagged as changed " + r.flagged.slice(0, 10),
    sign(r.shift_wh) + r.shift_wh.toFixed(1) + " Wh (" + sign(r.shift_sd) + r.shift_sd.toFixed(1)
      + " sd) against the prediction",
    "CUSUM " + fmt(r.statistic) + " (threshold " + fmt(r.threshold) + ")",
    r.traversals_since + " reading(s) since the flag, " + r.set_aside + " older reading(s) set aside",
  ];
  const tip = document.createElement("div");
  for (const line of lines) {
    const div = document.createElement("div");
    div.textContent = line;
    tip.appendChild(div);
  }
  return tip;
}

async function loadChanges() {
  const rows = await api("GET", "/api/changes");
  const features = ui.layers.features;
  // one line per road, with its newest flag (rows come oldest first), as `ev-nav map` draws them
  const newest = new Map();
  for (const r of rows) newest.set(r.segment, r);
  if (ui.changes) ui.changes.remove();
  ui.changes = L.layerGroup();
  for (const [e, r] of newest) {
    const f = features[e];
    if (!f || f.properties.segment !== e) {
      throw new Error("the changed road " + e + " is not in the server's layers");
    }
    L.polyline(f.geometry.coordinates.map((c) => [c[1], c[0]]), {
      pane: "changes", color: CHANGE_COLOR, weight: 7, opacity: 0.85, lineCap: "round",
      className: "ev-nav-change",
    }).bindTooltip(changeTip(r), { sticky: true }).addTo(ui.changes);
  }
  ui.changes.addTo(ui.map);
  const legend = $("changes-legend");
  legend.innerHTML = "";
  const swatch = document.createElement("span");
  swatch.className = "swatch";
  swatch.style.background = CHANGE_COLOR;
  const text = document.createElement("span");
  text.textContent = " road flagged as changed (" + newest.size.toLocaleString("en") + ")"
    + (newest.size ? ": hover one for the evidence" : "");
  legend.append(swatch, text);
}

function colourLayer() {
  if (!ui.layers) return;
  const name = $("layer-select").value;
  const scale = makeScale(name, ui.layers.features);
  ui.scale = scale;
  ui.network.setStyle((f) => ({ color: scale.color(f.properties[name]), weight: 3 }));
  drawLegend(scale, ui.layers.layers[name]);
}

// ------------------------------------------------------------------ planning
function badge(letter, color) {
  return L.divIcon({
    className: "ev-marker ev-marker-" + letter,
    html: '<div class="ev-badge" style="background:' + color + '">' + letter + "</div>",
    iconSize: [22, 22],
    iconAnchor: [11, 11],
  });
}

function clearRoutes() {
  ui.routes.forEach((l) => l.remove());
  ui.routes = [];
}

function resetTrip() {
  clearRoutes();
  ui.markers.forEach((m) => m.remove());
  ui.markers = [];
  ui.origin = ui.goal = null;
  ui.trip = null;
  $("routes").hidden = true;
  $("record").hidden = true;
  $("trip-head").textContent = "";
  $("explain").textContent = "";
}

// ------------------------------------------------------------------ route options
// The via field holds "lat,lon; lat,lon"; it is read (and checked) when a trip is planned.
function parseVia(text) {
  const points = [];
  for (const part of text.split(";")) {
    if (!part.trim()) continue;
    const xy = part.split(",").map((v) => Number(v.trim()));
    if (xy.length !== 2 || !xy.every(Number.isFinite) || Math.abs(xy[0]) > 90
        || Math.abs(xy[1]) > 180) {
      throw new Error("via: expected lat,lon; lat,lon … in degrees, got '" + part.trim() + "'");
    }
    points.push(xy);
  }
  return points;
}

function drawVia(points) {
  ui.viaMarkers.forEach((m) => m.remove());
  ui.viaMarkers = points.map((p) => L.marker(p, { icon: badge("V", "#7b3294") }).addTo(ui.map));
}

function addVia(latlng) {
  const field = $("via");
  const point = latlng.lat.toFixed(6) + "," + latlng.lng.toFixed(6);
  field.value = field.value.trim() ? field.value.trim() + "; " + point : point;
  try { drawVia(parseVia(field.value)); } catch (err) { status(err.message, "error"); }
}

// The options of the route request from the panel: via, avoid, time_weight (errors thrown).
function routeOptions() {
  const opts = {};
  const via = parseVia($("via").value);
  if (via.length) opts.via = via;
  const avoid = [...document.querySelectorAll(".avoid-kind:checked")].map((el) => el.value);
  if (avoid.length) opts.avoid = avoid;
  const tw = $("time-weight").value.trim();
  if (tw !== "") {
    const value = Number(tw);
    if (!Number.isFinite(value) || value < 0) {
      throw new Error("price of time: expected a number of Wh per minute >= 0, got '" + tw + "'");
    }
    if (value > 0) opts.time_weight = value;
  }
  return opts;
}

function onMapClick(e) {
  if (ui.busy) return;
  if (e.originalEvent && e.originalEvent.shiftKey) {
    addVia(e.latlng);
    return;
  }
  if (!ui.origin || ui.goal) {
    resetTrip();
    ui.origin = e.latlng;
    ui.markers.push(L.marker(e.latlng, { icon: badge("A", "#1a9850") }).addTo(ui.map));
    $("hint").textContent = "Now click the destination.";
    return;
  }
  ui.goal = e.latlng;
  ui.markers.push(L.marker(e.latlng, { icon: badge("B", "#222222") }).addTo(ui.map));
  plan();
}

async function plan() {
  let options;
  try {
    options = routeOptions();
  } catch (err) {
    status(err.message, "error");
    $("hint").textContent = "Fix the option, then click the map to choose a new start.";
    return;
  }
  drawVia(options.via || []);
  const body = {
    origin: [ui.origin.lat, ui.origin.lng],
    goal: [ui.goal.lat, ui.goal.lng],
    policy: $("policy").value,
    ...options,
  };
  const soc = $("soc").value.trim();
  const vehicle = $("vehicle").value.trim();
  if (soc) body.soc = soc;
  if (vehicle) body.vehicle = vehicle;
  ui.busy = true;
  status("planning…");
  try {
    const trip = await api("POST", "/api/routes", body);
    ui.trip = trip;
    showTrip(trip);
    status("trip " + trip.trip + " planned (model version " + trip.model_version + ")", "ok");
  } catch (err) {
    status(err.message, "error");
    $("hint").textContent = "Click the map to choose a new start.";
    ui.goal = ui.goal || ui.origin; // the next click starts over
  } finally {
    ui.busy = false;
  }
}

function showTrip(trip) {
  clearRoutes();
  const bounds = L.latLngBounds([]);
  for (const [name, style] of Object.entries(ROUTE_STYLE)) {
    const r = trip.routes[name];
    if (!r) continue;
    const latlngs = r.coordinates.map((c) => [c[1], c[0]]);
    const line = L.polyline(latlngs, {
      pane: "routes", color: style.color, weight: style.weight, opacity: 1, lineCap: "butt",
      className: "ev-route ev-route-" + name.replace(" ", "-"),
    }).bindTooltip(name + ": " + r.km.toFixed(2) + " km, predicted " + fmt(r.predicted_wh)
      + " ± " + fmt(r.predicted_sd_wh) + " Wh (model sd)", { sticky: true }).addTo(ui.map);
    ui.routes.push(line);
    bounds.extend(line.getBounds());
  }
  ui.markers.forEach((m) => m.setZIndexOffset(1000));
  if (bounds.isValid()) ui.map.fitBounds(bounds, { padding: [30, 30], animate: false });  // no animation: a click right after lands where it was aimed

  const constraints = [];
  if (trip.via && trip.via.length) constraints.push("via " + trip.via.length + " point(s)");
  if (trip.avoid && trip.avoid.length) constraints.push("avoiding " + trip.avoid.join(", "));
  if (trip.time_weight_wh_per_min) {
    constraints.push("time priced at " + fmt(trip.time_weight_wh_per_min) + " Wh/min");
  }
  $("trip-head").textContent = "trip " + trip.trip + " (policy " + trip.policy
    + (trip.vehicle ? ", " + trip.vehicle : "") + ")"
    + (constraints.length ? ": " + constraints.join("; ") : "");
  const tbody = $("routes").querySelector("tbody");
  tbody.innerHTML = "";
  const withArrival = trip.departure_soc_pct !== undefined;
  $("routes").querySelectorAll(".arrival").forEach((el) => { el.hidden = !withArrival; });
  for (const [name, r] of Object.entries(trip.routes)) {
    const tr = document.createElement("tr");
    tr.dataset.route = name;
    const color = (ROUTE_STYLE[name] || {}).color || TABLE_COLOR[name] || "#777";
    const cells = [
      '<span class="swatch" style="background:' + color + '"></span>', name,
      r.km.toFixed(2), r.minutes.toFixed(1), fmt(r.predicted_wh), fmt(r.predicted_sd_wh),
    ];
    if (withArrival) {
      cells.push(r.arrival ? r.arrival.soc_pct.toFixed(1) + "%" : "");
    }
    cells.forEach((c, i) => {
      const td = document.createElement("td");
      if (i === 0) td.innerHTML = c; else td.textContent = c;
      tr.appendChild(td);
    });
    tbody.appendChild(tr);
  }
  $("routes").hidden = false;
  const notes = [];
  if (trip.exploring_extra_wh !== null && trip.exploring_extra_wh !== undefined) {
    notes.push("exploring: " + (trip.exploring_extra_wh >= 0 ? "+" : "")
      + trip.exploring_extra_wh + " Wh against the best guess (predicted; exploring is how "
      + "the fleet learns)");
  }
  (trip.notices || []).forEach((n) => notes.push(n));
  if (trip.warning) notes.push(trip.warning);
  $("explain").textContent = notes.join(" · ");
  $("explain").className = trip.warning ? "warning" : "muted";
  $("trip-id").textContent = trip.trip;
  $("record").hidden = false;
  $("hint").textContent = "Click the map to plan another trip.";
}

// ------------------------------------------------------------------ recording
async function recordTotal() {
  if (!ui.trip) return;
  const value = Number($("total-wh").value);
  if ($("total-wh").value.trim() === "" || !Number.isFinite(value)) {
    status("give the trip's energy in Wh", "error");
    return;
  }
  const body = { total_wh: value, force: $("force").checked };
  status("recording…");
  try {
    const ack = await api("POST", "/api/trips/" + ui.trip.trip + "/observations", body);
    status("trip " + ack.trip + ": recorded " + fmt(ack.observed_wh) + " Wh (predicted "
      + fmt(ack.predicted_wh) + " Wh, model sd " + fmt(ack.predicted_sd_wh)
      + " Wh); the model is learning", "ok");
    $("record").hidden = true;
    waitForModel(ack.batch);
  } catch (err) {
    status(err.message, "error");
  }
}

async function waitForModel(batch) {
  for (let i = 0; i < 120; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    try {
      const h = await api("GET", "/api/health");
      showHealth(h);
      if (h.model_applied_upto >= batch) {
        await loadLayers();
        status("the model learned from the trip (model version " + h.model_version + ")", "ok");
        return;
      }
    } catch (err) {
      status(err.message, "error");
      return;
    }
  }
}

// ------------------------------------------------------------------ start
function showHealth(h) {
  ui.health = h;
  $("health").textContent = h.network + " · " + h.segments.toLocaleString("en")
    + " segments · model " + h.model + " v" + h.model_version + " · " + h.trips + " trips";
  $("token-row").hidden = !h.token_required;
}

async function start() {
  // no box zoom: shift-click adds a via point
  ui.map = L.map("map", { zoomControl: true, boxZoom: false });
  ui.map.on("click", onMapClick);
  // drawn in this order: the network (overlay pane), the changed roads, the routes, markers;
  // a click on a changed road (a path that only shows a tooltip) still reaches the map
  ui.map.createPane("changes").style.zIndex = 450;
  ui.map.createPane("routes").style.zIndex = 500;
  L.control.scale().addTo(ui.map);
  $("layer-select").addEventListener("change", colourLayer);
  $("record-btn").addEventListener("click", recordTotal);
  try {
    const h = await api("GET", "/api/health");
    showHealth(h);
    const [lon0, lat0, lon1, lat1] = h.bounds;
    ui.map.fitBounds([[lat0, lon0], [lat1, lon1]]);
    await loadLayers();
    document.body.dataset.ready = "1";
  } catch (err) {
    status(err.message, "error");
  }
}

start();
