/* boe report and question pages.
 *
 * The report embeds every question as compact JSON (see boe/report/questions.py)
 * and draws a question's page only when it is opened (#q/DATASET/ID), so a
 * report of thousands of questions opens fast. A standalone question page
 * (boe show --html) holds one question and is drawn at once. Text from records
 * is always set with textContent, never parsed as HTML.
 */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var D = null, IM = null;

  function data() {
    if (D === null) D = JSON.parse(document.getElementById("boe-data").textContent);
    return D;
  }
  function images() {
    if (IM === null) IM = JSON.parse(document.getElementById("boe-images").textContent);
    return IM;
  }
  function S(i) { return i === null || i === undefined || i < 0 ? null : data().strings[i]; }

  /* The compact form (boe/report/questions.py) made readable once per question. */
  var READY = {};
  function question(n) {
    if (n in READY) return READY[n];
    var q = data().questions[n];
    var out = {};
    for (var k in q) out[k] = q[k];
    out.text = S(q.text);
    out.how = S(q.how) || "";
    out.close = q.close === undefined ? "" : S(q.close);
    out.log = q.log.map(function (a, n) {
      var x = a[9] || {}, v = a[8];
      return {
        id: a[0], kind: a[1], cl: a[2], ca: a[3], cost: a[4], o: a[5], why: a[6], kap: a[7],
        v: v ? { k: S(v[0]) || "view", f: v[1], b: v[2] || null, m: v[3] || null, s: S(v[4]), mb: v[5] || null } : null,
        err: x.err || null, up: x.up || null, dn: x.dn || null, unobserved: !!x.unobserved,
        words: q.words ? S(q.words[n]) : null, inert: q.inert ? !!q.inert[n] : false
      };
    });
    READY[n] = out;
    return out;
  }

  function h(tag, attrs) {
    var e = document.createElement(tag);
    setAttrs(e, attrs);
    for (var i = 2; i < arguments.length; i++) add(e, arguments[i]);
    return e;
  }
  function s(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    setAttrs(e, attrs);
    for (var i = 2; i < arguments.length; i++) add(e, arguments[i]);
    return e;
  }
  function setAttrs(e, attrs) {
    if (!attrs) return;
    for (var k in attrs) {
      if (attrs[k] === null || attrs[k] === undefined || attrs[k] === false) continue;
      if (k === "text") e.textContent = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
  }
  function add(e, c) {
    if (c === null || c === undefined || c === false) return;
    if (Array.isArray(c)) { c.forEach(function (x) { add(e, x); }); return; }
    e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  function fmt(x, d) { return x === null || x === undefined ? "–" : Number(x).toFixed(d === undefined ? 3 : d); }
  function num(x) { return x === null || x === undefined ? "–" : (Math.round(x) === x ? String(x) : String(Number(x.toFixed(3)))); }

  // kind labels come with the page data (each kind's spec, boe.kinds); "factor" labels a record without kinds
  var KIND = { factor: "factor check" };
  function kindOf(k) { return (data().kinds || {})[k] || {}; }
  function kindLabel(k) { return kindOf(k).label || KIND[k] || k; }
  var OUT = { c: "confirm", r: "reject", u: "unresolved" };
  var OUT_MARK = { c: "\u2713", r: "\u2717", u: "?" };

  function answerOf(q, i) {
    if (i < 0 || i >= q.cand.length) return "–";
    var a = S(q.cand[i][0]);
    return a === null ? "(invalid)" : a;
  }
  function correct(q, i) {
    if (i < 0 || i >= q.cand.length) return null;
    var u = q.cand[i][2];
    return u === null ? null : u >= 0.5;
  }
  function okMark(v) {
    return v === null ? h("span", { "class": "muted", text: "" }) :
      h("span", { "class": v ? "ok" : "bad", title: v ? "correct" : "wrong", text: v ? " \u2713" : " \u2717" });
  }

  /* ---------- images with crop boxes and masks ---------- */

  function extent(q, fi) {
    var w = 0, hh = 0;
    q.log.forEach(function (st) {
      var v = st.v;
      if (!v || v.f !== fi) return;
      if (v.b) { w = Math.max(w, v.b[2]); hh = Math.max(hh, v.b[3]); }
      if (v.mb) { w = Math.max(w, v.mb[2]); hh = Math.max(hh, v.mb[3]); }
      (v.m || []).forEach(function (p) { for (var i = 0; i < p.length; i += 2) { w = Math.max(w, p[i]); hh = Math.max(hh, p[i + 1]); } });
    });
    return [w || 256, hh || 256];
  }
  function imageInfo(q, fi) {
    var key = q.img[fi];
    var im = key !== undefined ? images()[key] || {} : {};
    var ext = extent(q, fi);
    return { src: im.src || null, w: im.w || ext[0], h: im.h || ext[1], err: im.err || (key === undefined ? "the record names no image" : null) };
  }
  function polyPath(p) {
    var d = "M" + p[0] + "," + p[1];
    for (var i = 2; i < p.length; i += 2) d += "L" + p[i] + "," + p[i + 1];
    return d + "Z";
  }
  function baseImage(info) {
    if (info.src) return s("image", { href: info.src, x: 0, y: 0, width: info.w, height: info.h, preserveAspectRatio: "none" });
    return s("g", null, s("rect", { x: 0, y: 0, width: info.w, height: info.h, fill: "#2a2d33" }),
      s("text", { x: info.w / 2, y: info.h / 2, fill: "#aab", "font-size": info.w / 18, "text-anchor": "middle", text: "image not available" }));
  }
  function scan(q, fi) {
    var info = imageInfo(q, fi);
    var svg = s("svg", { "class": "scan", viewBox: "0 0 " + info.w + " " + info.h, role: "img",
      "aria-label": "image " + fi + " with the views the evidence used" });
    svg.appendChild(baseImage(info));
    var fs = Math.max(info.w, info.h) / 22;
    var groups = [], byKey = {};  // steps that used the same view share one outline and one label
    q.log.forEach(function (st, n) {
      var v = st.v;
      if (!v || v.f !== fi || (!v.b && !v.mb && !(v.m && v.m.length))) return;
      var key = JSON.stringify([v.b || null, v.m || null, v.mb || null]);
      if (!(key in byKey)) { byKey[key] = groups.length; groups.push({ v: v, steps: [] }); }
      groups[byKey[key]].steps.push({ n: n + 1, st: st });
    });
    groups.forEach(function (gr) {
      var v = gr.v, last = gr.steps[gr.steps.length - 1].st;
      var g = s("g", { "class": "view o-" + last.o });
      add(g, s("title", { text: gr.steps.map(function (x) { return "step " + x.n + ": " + (S(x.st.id) || "") + " \u2192 " + OUT[x.st.o]; }).join("\n") }));
      var label = gr.steps.map(function (x) { return x.n; }).join(",");
      (v.m || []).forEach(function (p) { g.appendChild(s("path", { "class": "mask", d: polyPath(p) })); });
      if (v.mb) g.appendChild(s("rect", { "class": "maskbox", x: v.mb[0], y: v.mb[1], width: v.mb[2] - v.mb[0], height: v.mb[3] - v.mb[1] }));
      var at = v.b || v.mb;
      if (v.b) g.appendChild(s("rect", { "class": "crop", x: v.b[0], y: v.b[1], width: v.b[2] - v.b[0], height: v.b[3] - v.b[1] }));
      if (at) g.appendChild(s("text", { "class": "lab", x: at[0] + fs * 0.3, y: at[1] + fs * 1.05, "font-size": fs, text: label }));
      else g.appendChild(s("text", { "class": "lab", x: v.m[0][0], y: v.m[0][1], "font-size": fs, text: label }));
      svg.appendChild(g);
    });
    return { svg: svg, info: info };
  }
  function viewThumb(q, st) {
    var v = st.v;
    if (!v) return h("span", { "class": "badge", text: "no view recorded" });
    var shaped = v.b || v.mb || (v.m && v.m.length);
    if (shaped || v.k === "whole") {
      var info = imageInfo(q, v.f || 0);
      var box;
      if (v.b || v.mb) box = (v.b || v.mb).slice();
      else if (shaped) {
        box = [Infinity, Infinity, -Infinity, -Infinity];
        v.m.forEach(function (p) { for (var i = 0; i < p.length; i += 2) { box[0] = Math.min(box[0], p[i]); box[1] = Math.min(box[1], p[i + 1]); box[2] = Math.max(box[2], p[i]); box[3] = Math.max(box[3], p[i + 1]); } });
      } else box = [0, 0, info.w, info.h];
      var pad = shaped && !v.b ? 0.1 * Math.max(box[2] - box[0], box[3] - box[1]) : 0;
      var vb = [box[0] - pad, box[1] - pad, box[2] - box[0] + 2 * pad, box[3] - box[1] + 2 * pad];
      var svg = s("svg", { viewBox: vb.join(" "), role: "img", "class": "o-" + st.o,
        "aria-label": (v.b ? "crop " : v.m ? "mask " : "whole image ") + "seen by step" });
      svg.appendChild(baseImage(info));
      (v.m || []).forEach(function (p) { svg.appendChild(s("path", { "class": "mask", d: polyPath(p) })); });
      if (v.mb) svg.appendChild(s("rect", { "class": "maskbox", x: v.mb[0], y: v.mb[1], width: v.mb[2] - v.mb[0], height: v.mb[3] - v.mb[1] }));
      return svg;
    }
    return h("span", { "class": "badge", text: v.k + (v.s ? " \u00b7 " + v.s : "") });
  }

  /* ---------- candidate table ---------- */

  function candidateTable(q) {
    var D = data();
    var width = 0;
    q.cand.forEach(function (c) { width = Math.max(width, c[5].length); });
    var slots = D.slots.slice(0, width);
    var head = h("tr", null, h("th", { text: "#" }), h("th", { "class": "l", text: "answer" }),
      slots.map(function (n) { return h("th", { "class": "l", text: n }); }),
      h("th", { text: "valid" }), h("th", { text: "correct" }), h("th", { "class": "l", text: "score before \u2192 after" }));
    var body = h("tbody");
    q.co.forEach(function (i) {
      var c = q.cand[i];
      var before = c[3], after = c[4];
      var delta = before !== null && after !== null ? after - before : null;
      var tr = h("tr", { "class": (i === q.sel ? "selected " : "") + (c[1] ? "" : "invalid"), "data-cand": i },
        h("td", { text: String(i) }),
        h("td", { "class": "l ans", title: q.rawtext && q.rawtext[i] ? q.rawtext[i] : null },
          S(c[0]) === null ? h("span", { "class": "muted", text: "(none)" }) : S(c[0]),
          i === q.sel ? h("span", { "class": "mark", title: "selected", text: "\u2605" }) : null,
          i === q.raw ? h("span", { "class": "mark", title: "raw majority", text: "\u25c6" }) : null),
        slots.map(function (n, j) { var v = S(c[5][j]); return h("td", { "class": "l" + (v === null ? " muted" : ""), text: v === null ? "\u2205" : v }); }),
        h("td", { text: c[1] ? "yes" : "no", "class": c[1] ? "" : "bad" }),
        h("td", null, c[2] === null ? h("span", { "class": "muted", text: "?" }) : okMark(c[2] >= 0.5)),
        h("td", { "class": "l" },
          fmt(before), " \u2192 ", h("b", { text: fmt(after) }),
          delta !== null && Math.abs(delta) > 5e-4 ? h("span", { "class": delta > 0 ? "up" : "down", text: delta > 0 ? " \u25b2" : " \u25bc" }) : null,
          h("span", { "class": "sbar" },
            h("i", { "class": "b", style: "width:" + (100 * (before || 0)).toFixed(1) + "%" }),
            h("i", { "class": "a", style: "width:" + (100 * (after || 0)).toFixed(1) + "%" }))));
      body.appendChild(tr);
    });
    return h("div", { "class": "scroll" }, h("table", { "class": "data cands" }, h("thead", null, head), body));
  }

  /* ---------- the signed candidate-claim graph ---------- */

  function graph(q) {
    var D = data(), ROW = 22, TOP = 10, CW = 210, LW = 250, GAP = 230;
    var k = q.cand.length, m = q.claims.length;
    var bought = {}, whole = {};
    q.log.forEach(function (st, n) {
      if (st.cl >= 0 && !(st.cl in bought)) bought[st.cl] = [];
      if (st.cl >= 0) bought[st.cl].push({ n: n + 1, o: st.o });
      if (st.ca >= 0 && st.cl < 0) (whole[st.ca] = whole[st.ca] || []).push({ n: n + 1, o: st.o });
    });
    // claim rows with a header row per slot
    var rows = [], last = null;
    q.lo.forEach(function (j) {
      if (q.cslot[j] !== last) { rows.push({ head: D.slots[q.cslot[j]] }); last = q.cslot[j]; }
      rows.push({ claim: j });
    });
    var height = TOP * 2 + Math.max(k, rows.length) * ROW;
    var width = CW + GAP + LW;
    var svg = s("svg", { "class": "graph", width: width, height: height, viewBox: "0 0 " + width + " " + height, role: "img",
      "aria-label": "signed candidate-claim graph" });
    var cy = {}, ly = {};
    var offC = TOP + (height - 2 * TOP - k * ROW) / 2;
    q.co.forEach(function (i, r) { cy[i] = offC + r * ROW + ROW / 2; });
    var offL = TOP + (height - 2 * TOP - rows.length * ROW) / 2;
    rows.forEach(function (row, r) { if (row.claim !== undefined) ly[row.claim] = offL + r * ROW + ROW / 2; });
    var edges = s("g", { "class": "edges" });
    var x1 = CW, x2 = CW + GAP, mx = (x1 + x2) / 2;
    for (var j = 0; j < m; j++) {
      var signs = q.inc[j];
      for (var i = 0; i < k; i++) {
        var c = signs.charAt(i);
        if (c === ".") continue;
        edges.appendChild(s("path", { "class": "e " + (c === "+" ? "pos" : "neg"), "data-c": i, "data-l": j,
          d: "M" + x1 + "," + cy[i] + "C" + mx + "," + cy[i] + " " + mx + "," + ly[j] + " " + x2 + "," + ly[j] }));
      }
    }
    svg.appendChild(edges);
    function badge(g, x, y, marks) {
      marks.forEach(function (b, t) {
        var bg = s("g", { "class": "badge o-" + b.o });
        add(bg, s("title", { text: "step " + b.n + ": " + OUT[b.o] }));
        bg.appendChild(s("circle", { cx: x + t * 19, cy: y, r: 8.5 }));
        bg.appendChild(s("text", { x: x + t * 19, y: y + 0.5, "dominant-baseline": "middle", text: OUT_MARK[b.o] + b.n }));
        g.appendChild(bg);
      });
    }
    q.co.forEach(function (i) {
      var c = q.cand[i], ok = correct(q, i);
      var marks = whole[i] || [];
      var g = s("g", { "class": "node cand" + (ok ? " correct" : "") + (i === q.sel ? " sel" : "") + (marks.length ? " bought o-" + marks[marks.length - 1].o : ""), "data-c": i });
      add(g, s("title", { text: "candidate " + i + ": " + answerOf(q, i) + (ok === null ? "" : ok ? " (correct)" : " (wrong)") }));
      g.appendChild(s("rect", { x: 2, y: cy[i] - ROW / 2 + 2, width: CW - 4, height: ROW - 4 }));
      var label = "#" + i + " " + answerOf(q, i);
      if (label.length > 26) label = label.slice(0, 25) + "\u2026";
      g.appendChild(s("text", { x: 8, y: cy[i], text: label + (i === q.sel ? " \u2605" : "") + (i === q.raw ? " \u25c6" : "") }));
      badge(g, CW - 14 - 19 * (marks.length - 1), cy[i], marks);
      svg.appendChild(g);
    });
    rows.forEach(function (row, r) {
      var y = offL + r * ROW + ROW / 2;
      if (row.head !== undefined) { svg.appendChild(s("text", { "class": "slothead", x: x2 + 4, y: y + 4, text: row.head })); return; }
      var j = row.claim, marks = bought[j] || [];
      var g = s("g", { "class": "node claim" + (marks.length ? " bought o-" + marks[marks.length - 1].o : ""), "data-l": j });
      var id = S(q.claims[j]) || "";
      add(g, s("title", { text: id + (marks.length ? " (bought: " + marks.map(function (b) { return "step " + b.n + " " + OUT[b.o]; }).join(", ") + ")" : "") }));
      g.appendChild(s("rect", { x: x2, y: y - ROW / 2 + 2, width: LW - 4, height: ROW - 4 }));
      var eq = id.indexOf("=");
      var label = eq >= 0 ? id.slice(eq + 1) : id;
      if (label.length > 28) label = label.slice(0, 27) + "\u2026";
      g.appendChild(s("text", { x: x2 + 7, y: y, text: label }));
      badge(g, x2 + LW - 16 - 19 * (marks.length - 1), y, marks);
      svg.appendChild(g);
    });
    // hovering a node shows its edges
    svg.addEventListener("mouseover", function (ev) {
      var node = ev.target.closest ? ev.target.closest(".node") : null;
      Array.prototype.forEach.call(svg.querySelectorAll(".e.on"), function (e) { e.classList.remove("on"); });
      if (!node) { svg.classList.remove("hl"); return; }
      var sel = node.hasAttribute("data-c") ? '.e[data-c="' + node.getAttribute("data-c") + '"]' : '.e[data-l="' + node.getAttribute("data-l") + '"]';
      Array.prototype.forEach.call(svg.querySelectorAll(sel), function (e) { e.classList.add("on"); });
      svg.classList.add("hl");
    });
    svg.addEventListener("mouseleave", function () { svg.classList.remove("hl"); });
    var legend = h("div", { "class": "legend" },
      h("span", null, h("span", { "class": "sw", style: "border-color:var(--assert)" }), "asserts (+1)"),
      h("span", null, h("span", { "class": "sw", style: "border-color:var(--deny);border-top-style:dashed" }), "denies (\u22121)"),
      h("span", null, "outlined: bought (\u2713 confirm, \u2717 reject, ? unresolved; the number is the step)"),
      h("span", null, "\u2605 selected, \u25c6 raw majority; hover a node to follow its edges"));
    return h("div", null, h("div", { "class": "graphbox" }, svg), legend);
  }

  /* ---------- evidence log ---------- */

  function movedText(q, ix) {
    var count = {}, order = [];
    ix.forEach(function (i) { var a = answerOf(q, i); if (!(a in count)) { count[a] = 0; order.push(a); } count[a]++; });
    return order.map(function (a) { return a + "\u00d7" + count[a]; }).join(" ");
  }
  function moved(q, st) {
    if (st.up) return [st.up, st.dn];
    var up = [], dn = [], sign = st.o === "c" ? 1 : st.o === "r" ? -1 : 0;
    /* a kappa below 0.5 reverses the check (logit weight < 0); exactly 0.5 moves nothing */
    if (st.kap !== null && st.kap !== undefined) sign *= st.kap > 0.5 ? 1 : st.kap < 0.5 ? -1 : 0;
    if (sign && st.cl >= 0) {
      for (var i = 0; i < q.cand.length; i++) {
        var e = q.inc[st.cl].charAt(i), eff = (e === "+" ? 1 : e === "-" ? -1 : 0) * sign;
        if (eff > 0) up.push(i); else if (eff < 0) dn.push(i);
      }
    } else if (sign && st.ca >= 0) (sign > 0 ? up : dn).push(st.ca);
    return [up, dn];
  }
  function timeline(q) {
    if (!q.log.length) return h("p", { "class": "empty", text: "No evidence was bought for this question." });
    var views = q.log.some(function (st) { return !!st.v; });
    var ol = h("ol", { "class": "timeline" + (views ? "" : " noviews") });
    var spent = 0;
    q.log.forEach(function (st, n) {
      spent += st.cost || 0;
      var kind = S(st.kind) || "", mv = moved(q, st);
      var target = st.cl >= 0 ? h("code", { text: S(q.claims[st.cl]) || "" }) :
        st.ca >= 0 && kindOf(kind).target === "answer" ? h("span", null, "answer ", h("b", { text: answerOf(q, st.ca) }),
          " (every candidate giving it; shown as #" + st.ca + ")") :
        st.ca >= 0 ? h("span", null, "candidate #" + st.ca + " ", h("b", { text: answerOf(q, st.ca) })) : null;
      var li = h("li", { "class": "step o-" + st.o, "data-step": n + 1 },
        h("div", { "class": "num", text: String(n + 1) }),
        views ? h("div", { "class": "view" }, viewThumb(q, st)) : null,
        h("div", null,
          h("div", { "class": "head" }, h("b", { text: kindLabel(kind) }), " ", target, " ",
            h("span", { "class": "outcome", text: OUT_MARK[st.o] + " " + OUT[st.o] }),
            st.unobserved ? h("span", { "class": "tag harmed", title: "the record holds no outcome for this action; the replay read the placeholder", text: "not observed" }) : null,
            st.inert ? h("span", { "class": "tag", title: "neither a confirm nor a reject could have changed the selected answer", text: "could not change the choice" }) : null),
          h("div", { "class": "meta", text: "cost " + num(st.cost) + " (spent " + num(spent) + ")" + (st.kap !== null && st.kap !== undefined ? " \u00b7 \u03ba " + fmt(st.kap) : "") + " \u00b7 " + (S(st.id) || "") }),
          st.words ? h("div", { "class": "words", text: st.words }) : null,
          S(st.why) ? h("div", { "class": "why", text: "\u201c" + S(st.why) + "\u201d" }) : null,
          st.err ? h("div", { "class": "err", text: "error: " + st.err }) : null,
          mv[0].length || mv[1].length ? h("div", { "class": "moved" },
            mv[0].length ? h("span", { "class": "up", text: "\u2191 " + movedText(q, mv[0]) }) : null,
            mv[0].length && mv[1].length ? "   " : null,
            mv[1].length ? h("span", { "class": "down", text: "\u2193 " + movedText(q, mv[1]) }) : null) :
            h("div", { "class": "moved", text: "no candidate moved" })));
      ol.appendChild(li);
    });
    return ol;
  }

  /* ---------- a whole question ---------- */

  function policyTable(q) {
    var D = data();
    if (!q.ps || !D.policies) return null;
    var body = h("tbody");
    D.policies.forEach(function (p, t) {
      var i = q.ps[t];
      body.appendChild(h("tr", { "class": p === D.focus ? "focus" : "" }, h("td", { "class": "l", text: p }),
        h("td", { "class": "l" }, "#" + i + " ", answerOf(q, i), okMark(correct(q, i)))));
    });
    return h("div", null, h("h3", { text: "Selected by each policy at C=" + num(D.budget) }),
      h("table", { "class": "data" }, h("thead", null, h("tr", null, h("th", { "class": "l", text: "policy" }), h("th", { "class": "l", text: "selected" }))), body));
  }
  function details(q) {
    var out = [];
    if (q.menu) {
      var body = h("tbody");
      q.menu.forEach(function (a) {
        body.appendChild(h("tr", { "class": a.o ? "o-" + a.o : "" },
          h("td", { "class": "l" }, h("code", { text: a.id || "" })), h("td", { "class": "l", text: a.kind ? kindLabel(a.kind) : "" }),
          h("td", { text: num(a.cost) }), h("td", { "class": "l", text: a.o ? OUT[a.o] : "not run" }),
          h("td", { "class": "l", text: S(a.why) || "" })));
      });
      out.push(h("details", null, h("summary", { text: "The whole menu (" + q.menu.length + " actions)" }),
        h("div", { "class": "scroll" }, h("table", { "class": "data" }, h("thead", null, h("tr", null,
          ["action", "kind", "cost", "outcome", "rationale"].map(function (t, n) { return h("th", { "class": n === 2 ? "" : "l", text: t }); }))), body))));
    }
    if (q.calls && q.calls.length) {
      var cb = h("tbody");
      q.calls.forEach(function (c) {
        cb.appendChild(h("tr", null, h("td", { "class": "l", text: c[0] || "" }), h("td", { "class": "l", text: c[7] || "" }),
          h("td", { "class": "l", text: c[1] || "" }), h("td", { text: num(c[2]) }), h("td", { text: num(c[3]) }),
          h("td", { text: num(c[4]) }), h("td", { text: c[5] ? "yes" : "" }), h("td", { "class": "l bad", text: c[6] || "" })));
      });
      out.push(h("details", null, h("summary", { text: "Model calls (" + q.calls.length + ")" }),
        h("div", { "class": "scroll" }, h("table", { "class": "data calls" }, h("thead", null, h("tr", null,
          ["purpose", "action", "model", "prompt tokens", "completion tokens", "latency ms", "cached", "error"].map(function (t, n) { return h("th", { "class": n < 3 || n === 7 ? "l" : "", text: t }); }))), cb))));
    }
    if (q.rawtext) {
      out.push(h("details", null, h("summary", { text: "Raw model replies" }),
        q.rawtext.map(function (t, i) { return h("div", null, h("b", { text: "#" + i }), h("pre", { "class": "raw", text: t === null ? "(none)" : t })); })));
    }
    return out;
  }
  function render(sec, q) {
    sec.textContent = "";
    var derived = q.how.indexOf("replay") === 0;
    var nav = h("div", { "class": "crumbs" });
    if (document.getElementById("report")) {
      nav.appendChild(h("a", { href: "#questions", text: "\u2190 " + document.title }));
      var nb = neighbours(sec.id);
      if (nb[0]) nav.appendChild(h("a", { href: "#" + nb[0], text: "\u2039 previous" }));
      if (nb[1]) nav.appendChild(h("a", { href: "#" + nb[1], text: "next \u203a" }));
    }
    sec.appendChild(nav);
    sec.appendChild(h("h2", { "class": "qtitle", text: q.ds + " / " + q.id }));
    if (q.text) sec.appendChild(h("p", { "class": "question", text: q.text }));
    if (q.opts) {
      sec.appendChild(h("ul", { "class": "opts" }, Object.keys(q.opts).map(function (k) { return h("li", null, h("b", { text: k + ". " }), String(q.opts[k])); })));
    }
    var selOk = correct(q, q.sel), rawOk = correct(q, q.raw);
    sec.appendChild(h("div", { "class": "verdict" },
      h("div", null, "selected ", h("b", { text: answerOf(q, q.sel) }), okMark(selOk)),
      h("div", null, "raw majority ", h("b", { text: answerOf(q, q.raw) }), okMark(rawOk)),
      h("div", null, "reference ", h("b", { text: q.ref === null ? "–" : q.ref })),
      h("div", null, "evidence bought ", h("b", { text: String(q.log.length) }), " for ", h("b", { text: num(q.spent) })),
      rawOk === false && selOk ? h("div", { "class": "ok", text: "rescued" }) : null,
      rawOk && selOk === false ? h("div", { "class": "bad", text: "harmed" }) : null));
    sec.appendChild(h("p", { "class": "note", text: "Scores and evidence: " + q.how + "." }));
    var figs = h("div", { "class": "figs" });
    var shapes = q.log.some(function (st) { return st.v && (st.v.b || st.v.mb || (st.v.m && st.v.m.length)); });
    if (!q.img.length && !shapes) {
      figs.appendChild(h("p", { "class": "empty", text: "The record names no image, and no check used a crop or a mask." }));
    }
    var nfig = q.img.length || (shapes ? 1 : 0);
    for (var fi = 0; fi < nfig; fi++) {
      var r = scan(q, fi);
      figs.appendChild(h("figure", { "class": "scanfig", style: "margin:0" }, r.svg,
        h("figcaption", { "class": "figcap", text: (q.img.length ? "image " + (fi + 1) + " of " + q.img.length + (r.info.src ? ", " + r.info.w + "\u00d7" + r.info.h + " px" : "") : "no image") + (r.info.err ? " \u2014 " + r.info.err : "") + "; boxes and masks: the views of the bought checks, numbered by step" })));
    }
    sec.appendChild(h("div", { "class": "qgrid" }, figs, h("div", null, policyTable(q))));
    sec.appendChild(h("h3", { text: "Candidates (" + q.cand.length + ")" }));
    sec.appendChild(candidateTable(q));
    sec.appendChild(h("h3", { text: "Signed candidate\u2013claim graph (" + q.claims.length + " claims)" }));
    sec.appendChild(graph(q));
    sec.appendChild(h("h3", { text: "Evidence log" }));
    if (derived && q.log.length) sec.appendChild(h("p", { "class": "note", text: "Replayed from the record: \u2191/\u2193 list the candidates each outcome supports or opposes (its signed effect)." }));
    sec.appendChild(timeline(q));
    if (q.close) sec.appendChild(h("p", { "class": "note close", text: q.close }));
    add(sec, details(q));
    sec.setAttribute("data-rendered", "1");
  }

  /* ---------- report: routing, question table ---------- */

  var INDEX = null;
  function index() {
    if (INDEX === null) {
      INDEX = {};
      var sections = document.querySelectorAll("section.qpage");
      for (var i = 0; i < sections.length; i++) INDEX[sections[i].id] = i;
    }
    return INDEX;
  }
  var MATCHED = null;  // the question rows the table's filters let through, in order
  function neighbours(id) {
    var rows = MATCHED || Array.prototype.slice.call(document.querySelectorAll("#qtable tbody tr"));
    for (var i = 0; i < rows.length; i++) {
      if (rows[i].getAttribute("data-q") === id) {
        return [i > 0 ? rows[i - 1].getAttribute("data-q") : null, i + 1 < rows.length ? rows[i + 1].getAttribute("data-q") : null];
      }
    }
    return [null, null];
  }
  var shown = null;
  function route() {
    var id = decodeURIComponent(location.hash.slice(1));
    var sec = id.indexOf("q/") === 0 ? document.getElementById(id) : null;
    if (shown && shown !== sec) shown.hidden = true;
    if (!sec) {
      document.body.classList.remove("show-question");
      shown = null;
      return;
    }
    render(sec, question(index()[id]));
    sec.hidden = false;
    shown = sec;
    document.body.classList.add("show-question");
    window.scrollTo(0, 0);
  }
  function setupTable() {
    var table = document.getElementById("qtable");
    if (!table) return;
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var thumbs = table.querySelectorAll("img.thumb[data-img]");
    if ("IntersectionObserver" in window) {
      var io = new IntersectionObserver(function (entries) {
        entries.forEach(function (en) {
          if (!en.isIntersecting) return;
          var img = en.target, im = images()[img.getAttribute("data-img")];
          if (im && im.src) img.src = im.src;
          img.removeAttribute("data-img");
          io.unobserve(img);
        });
      }, { rootMargin: "300px" });
      Array.prototype.forEach.call(thumbs, function (t) { io.observe(t); });
    }
    var tag = document.getElementById("qfilter"), ds = document.getElementById("qdataset"), text = document.getElementById("qsearch");
    var count = document.getElementById("qcount"), pageLabel = document.getElementById("qpage");
    var prev = document.getElementById("qprev"), next = document.getElementById("qnext");
    var pager = table.parentNode.querySelector(".pager");
    var per = pager ? parseInt(pager.getAttribute("data-rows"), 10) || 100 : rows.length;
    var page = 0;
    function show() {
      var pages = Math.max(1, Math.ceil(MATCHED.length / per));
      page = Math.min(Math.max(page, 0), pages - 1);
      var on = {};
      for (var i = page * per; i < Math.min(MATCHED.length, (page + 1) * per); i++) on[MATCHED[i].getAttribute("data-q")] = 1;
      rows.forEach(function (tr) { tr.hidden = !(tr.getAttribute("data-q") in on); });
      if (pageLabel) pageLabel.textContent = "page " + (page + 1) + " of " + pages;
      if (prev) prev.disabled = page === 0;
      if (next) next.disabled = page >= pages - 1;
    }
    function apply() {
      var t = tag ? tag.value : "", d = ds ? ds.value : "", x = text ? text.value.trim().toLowerCase() : "";
      MATCHED = rows.filter(function (tr) {
        return (!t || (" " + tr.getAttribute("data-tags") + " ").indexOf(" " + t + " ") >= 0) &&
          (!d || tr.getAttribute("data-ds") === d) && (!x || tr.textContent.toLowerCase().indexOf(x) >= 0);
      });
      if (count) count.textContent = MATCHED.length + " of " + rows.length + " questions";
      page = 0;
      show();
    }
    [tag, ds].forEach(function (e) { if (e) e.addEventListener("change", apply); });
    if (text) text.addEventListener("input", apply);
    if (prev) prev.addEventListener("click", function () { page--; show(); });
    if (next) next.addEventListener("click", function () { page++; show(); });
    apply();
  }

  function start() {
    if (document.getElementById("report")) {
      setupTable();
      window.addEventListener("hashchange", route);
      route();
    } else {
      Array.prototype.forEach.call(document.querySelectorAll("section.qpage"), function (sec, i) { render(sec, question(i)); sec.hidden = false; });
    }
    document.documentElement.setAttribute("data-ready-ms", Math.round(performance.now()));
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
  window.addEventListener("load", function () {
    void document.body.offsetHeight; // the layout of the opened page is part of opening it
    document.documentElement.setAttribute("data-open-ms", Math.round(performance.now()));
  });
})();
