(function () {
  "use strict";
  var PAGE_SIZE = 100;
  var STATUSES = ["all", "ok", "error", "skipped"];
  var SORTS = [["", "manifest order"], ["score-desc", "score, highest first"],
               ["score-asc", "score, lowest first"], ["name", "input name"]];
  var data = JSON.parse(document.getElementById("records").textContent);
  var records = data.records, columns = data.columns, summary = data.summary;
  var byId = function (id) { return document.getElementById(id); };
  var statusFilter = byId("status-filter"), classFilter = byId("class-filter");
  var targetFilter = byId("target-filter"), knownTargets = Object.create(null);
  // A run that named its targets (--target): each target carries [spec, description, kind].
  var targetSpecs = data.targets || [], named = targetSpecs.length > 0;
  var caveatFilter = byId("caveat-filter"), knownCaveats = Object.create(null);
  knownCaveats.any = knownCaveats.none = true;
  var renderFilter = byId("render-filter");
  var sortSelect = byId("sort"), search = byId("search"), table = byId("rows");
  var collator = new Intl.Collator(undefined, {numeric: true, sensitivity: "base"});
  var knownClasses = {}, lowerNames = null, cache = {key: null, list: null};
  // The default title names the page's folder, read from its own address: the same run
  // written into two folders gives the same bytes.
  var heading = byId("title");
  if (heading.dataset.named === "folder") {
    var parts = location.pathname.split("/");
    var folder = parts.length > 1 ? parts[parts.length - 2] : "";
    try { folder = decodeURIComponent(folder); } catch (error) { /* keep it encoded */ }
    if (folder) {
      heading.textContent = heading.textContent + ": " + folder;
      document.title = heading.textContent;
    }
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }
  function thousands(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
  function option(select, value, text) {
    var node = el("option", null, text);
    node.value = value;
    select.appendChild(node);
  }
  function classTitle(number, label) {
    return label === null ? "class " + number : label + " (" + number + ")";
  }
  // The outputs grouped by method ("guided.color": guided, color) for each row's grid of
  // thumbnails; every row draws every slot, a blank one where it has no file, so the
  // grids line up from row to row whatever the number of methods and renders.
  var groups = [], groupOf = Object.create(null);
  // A run of several methods names its comparison panel "panel" alone: a render too.
  columns.forEach(function (column, index) {
    var dot = column.lastIndexOf("."), method = dot > 0 ? column.slice(0, dot) : column;
    var group = groupOf[method];
    if (!group) groups.push(group = groupOf[method] = {method: method, slots: []});
    group.slots.push({index: index, column: column,
                      render: dot > 0 ? column.slice(dot + 1) : column === "panel" ? "panel" : ""});
  });
  var renders = [];  // the renders a run wrote, for the render switch
  groups.forEach(function (group) {
    group.slots.forEach(function (slot) {
      if (slot.render && renders.indexOf(slot.render) < 0) renders.push(slot.render);
    });
  });

  // -- the fixed parts: summary, control choices, table head
  function setUp() {
    var counts = summary.statuses, line = byId("summary");
    line.appendChild(el("strong", null, thousands(summary.inputs) +
                        (summary.inputs === 1 ? " input" : " inputs")));
    line.appendChild(document.createTextNode(": "));
    [["ok", "ok"], ["error", "failed"], ["skipped", "skipped"]].forEach(function (pair, i) {
      if (i) line.appendChild(document.createTextNode(", "));
      var count = counts[pair[0]] || 0;
      var link = el("a", pair[0] + (count ? "" : " zero"), thousands(count) + " " + pair[1]);
      link.href = "#status=" + pair[0];
      line.appendChild(link);
    });
    var withCaveats = records.filter(function (r) { return r[4] && r[4].length; }).length;
    if (withCaveats) {
      line.appendChild(document.createTextNode(", "));
      var caveatLink = el("a", "caveat", thousands(withCaveats) + " with caveats");
      caveatLink.href = "#caveat=any";
      line.appendChild(caveatLink);
    }
    var rest = [];
    if (summary.methods.length) rest.push("methods " + summary.methods.join(", "));
    rest.push(thousands(summary.classes) + (summary.classes === 1 ? " class" : " classes"));
    if (named) {
      rest.push(thousands(targetSpecs.length) + (targetSpecs.length === 1 ? " target" :
                                                 " targets"));
    }
    rest.push("from " + summary.source);
    line.appendChild(document.createTextNode(" \u00b7 " + rest.join(" \u00b7 ")));

    STATUSES.forEach(function (status) {
      var count = status === "all" ? summary.inputs : (counts[status] || 0);
      option(statusFilter, status, status + " (" + thousands(count) + ")");
    });
    option(classFilter, "", "all classes");
    data.classes.forEach(function (pair) {
      knownClasses[String(pair[0])] = true;
      option(classFilter, String(pair[0]), classTitle(pair[0], pair[1]));
    });
    option(targetFilter, "", "all targets");
    targetSpecs.forEach(function (pair) {
      knownTargets[pair[0]] = true;
      option(targetFilter, pair[0], pair[0] + " (" + thousands(pair[1]) + ")");
    });
    byId("target-control").hidden = !named;
    SORTS.forEach(function (pair) { option(sortSelect, pair[0], pair[1]); });
    option(caveatFilter, "", "all");
    option(caveatFilter, "any", "any caveat (" + thousands(withCaveats) + ")");
    option(caveatFilter, "none", "no caveat (" + thousands(records.length - withCaveats) + ")");
    (summary.caveats || []).forEach(function (pair) {
      knownCaveats[pair[0]] = true;
      option(caveatFilter, pair[0], pair[0] + " (" + thousands(pair[1]) + ")");
    });
    byId("caveat-control").hidden = !withCaveats;
    option(renderFilter, "", "all renders");
    renders.forEach(function (render) { option(renderFilter, render, render); });
    byId("render-control").hidden = renders.length < 2;
    if (columns.length > 6) table.classList.add("dense");
    if (renders.indexOf("panel") >= 0 || columns.indexOf("panel") >= 0) {
      table.classList.add("panels");
    }

    var head = el("thead"), row = el("tr");
    ["#", "input", "status", named ? "target" : "class", "score"]
        .concat(columns.length ? ["maps"] : [])
        .forEach(function (name) { row.appendChild(el("th", null, name)); });
    head.appendChild(row);
    table.appendChild(head);
  }

  // -- the view in the URL hash
  function readState() {
    var params = new URLSearchParams(location.hash.replace(/^#/, ""));
    var state = {status: params.get("status") || "all", cls: params.get("class") || "",
                 target: params.get("target") || "", caveat: params.get("caveat") || "", render: params.get("render") || "",
                 sort: params.get("sort") || "", q: params.get("q") || "",
                 page: parseInt(params.get("page") || "1", 10)};
    if (STATUSES.indexOf(state.status) < 0) state.status = "all";
    if (!SORTS.some(function (pair) { return pair[0] === state.sort; })) state.sort = "";
    if (!Object.prototype.hasOwnProperty.call(knownClasses, state.cls)) state.cls = "";
    if (!Object.prototype.hasOwnProperty.call(knownTargets, state.target)) state.target = "";
    if (!(state.caveat in knownCaveats)) state.caveat = "";
    if (renders.indexOf(state.render) < 0) state.render = "";
    if (!(state.page >= 1)) state.page = 1;
    return state;
  }
  function hashOf(state) {
    var params = new URLSearchParams();
    if (state.status !== "all") params.set("status", state.status);
    if (state.cls !== "") params.set("class", state.cls);
    if (state.target) params.set("target", state.target);
    if (state.caveat) params.set("caveat", state.caveat);
    if (state.render) params.set("render", state.render);
    if (state.sort) params.set("sort", state.sort);
    if (state.q) params.set("q", state.q);
    if (state.page > 1) params.set("page", String(state.page));
    return params.toString();
  }
  // Change the view: a new history entry (fires hashchange), or, while typing, in place.
  function go(change, inPlace) {
    var state = readState();
    Object.keys(change).forEach(function (key) { state[key] = change[key]; });
    if (!("page" in change) && !("render" in change)) state.page = 1;
    var hash = hashOf(state);
    if (hash === location.hash.replace(/^#/, "")) { render(); return; }
    if (inPlace) {
      try {
        history.replaceState(null, "", location.href.split("#")[0] + (hash ? "#" + hash : ""));
        render();
        return;
      } catch (error) { /* a browser that refuses it for file: pages: push instead */ }
    }
    location.hash = hash;
  }

  // -- which records, in which order
  // The view's choice: a class (a number or null) and a target spec ("" for any).
  function chosen(state) {
    return {cls: state.cls === "" ? null : Number(state.cls), spec: state.target};
  }
  function fits(target, choice) {
    return (choice.cls === null || target[0] === choice.cls) &&
        (!choice.spec || (target[4] !== undefined && target[4][0] === choice.spec));
  }
  function targetOf(record, choice) {
    var targets = record[3];
    if (choice.cls === null && !choice.spec) return targets.length ? targets[0] : null;
    for (var i = 0; i < targets.length; i++) if (fits(targets[i], choice)) return targets[i];
    return null;
  }
  function filtered(choice) { return choice.cls !== null || choice.spec !== ""; }
  function scoreOf(record, choice) {
    var target = targetOf(record, choice);
    return target && target[2] !== null ? target[2] : null;
  }
  function hasCaveat(caveats, wanted) {
    if (wanted === "any" || wanted === "none") return (caveats.length > 0) === (wanted === "any");
    return caveats.some(function (caveat) { return caveat[0] === wanted; });
  }
  function matching(state) {
    var key = [state.status, state.cls, state.target, state.caveat, state.sort, state.q]
        .join("\u0000");
    if (cache.key === key) return cache.list;
    var choice = chosen(state), q = state.q.toLowerCase();
    if (q && !lowerNames) lowerNames = records.map(function (r) { return r[0].toLowerCase(); });
    var list = [];
    for (var i = 0; i < records.length; i++) {
      var record = records[i];
      if (state.status !== "all" && record[1] !== state.status) continue;
      if (filtered(choice) && !targetOf(record, choice)) continue;
      if (state.caveat && !hasCaveat(record[4] || [], state.caveat)) continue;
      if (q && lowerNames[i].indexOf(q) < 0) continue;
      list.push(i);
    }
    if (state.sort === "name") {
      list.sort(function (a, b) {
        return collator.compare(records[a][0], records[b][0]) || a - b;
      });
    } else if (state.sort) {
      var sign = state.sort === "score-desc" ? -1 : 1, scores = {};
      list.forEach(function (i) { scores[i] = scoreOf(records[i], choice); });
      list.sort(function (a, b) {  // records without a score go last either way
        if (scores[a] === null || scores[b] === null) {
          return (scores[a] === null) - (scores[b] === null) || a - b;
        }
        return sign * (scores[a] - scores[b]) || a - b;
      });
    }
    cache = {key: key, list: list};
    return list;
  }

  // -- drawing
  // Only a PNG is a link (a browser shows a .png file as a picture, whatever it holds). An
  // SVG figure is shown as an <img>, where a script inside it never runs, and opens in
  // this page's own viewer, never as a page of its own; a PDF figure is a link (the
  // browser's PDF viewer); any other file is named, not linked.
  function extension(href) {
    var match = /\.([a-z0-9]+)$/i.exec(href);
    return match ? match[1].toLowerCase() : "";
  }
  function picture(href, column) {
    var image = el("img");
    image.loading = "lazy";  // before src, or the browser starts loading at once
    image.decoding = "async";
    image.alt = column;
    image.addEventListener("error", function () {
      image.parentNode.classList.add("missing");
      image.remove();
    });
    image.src = href;
    return image;
  }
  function thumbnail(href, slot) {
    var column = slot.column, panel = slot.render === "panel" || column === "panel";
    var wide = panel || column === "figure";
    var box = el("div", "thumb" + (panel ? " panel" : wide ? " wide" : "") +
                 (href ? "" : " none"));
    var kind = href ? extension(href) : "", shown;
    if (!href) {
      shown = el("span", "blank");
    } else if (kind === "png") {
      shown = el("a");
      shown.href = href;
      shown.appendChild(picture(href, column));
    } else if (kind === "svg") {
      shown = el("button", "figure");
      shown.type = "button";
      shown.appendChild(picture(href, column));
      shown.addEventListener("click", function () { openViewer(href, column); });
    } else if (kind === "pdf") {
      shown = el("a", "file", "PDF");
      shown.href = href;
    } else {
      shown = el("span", "file unlinked", kind ? kind.toUpperCase() : "file");
    }
    shown.title = column;
    box.appendChild(shown);
    if (slot.render && href) box.appendChild(el("span", "render", slot.render));
    return box;
  }
  function openViewer(href, column) {
    var viewer = byId("viewer");
    byId("viewer-image").src = href;
    byId("viewer-image").alt = column;
    var path = href;
    try { path = decodeURIComponent(href); } catch (error) { /* keep it encoded */ }
    byId("viewer-name").textContent = column + " \u00b7 " + path;
    if (!viewer.open) viewer.showModal();
  }
  function mapsCell(target, onlyRender) {
    var cell = el("td", "maps"), grid = el("div", "grid");
    groups.forEach(function (group) {
      var shown = group.slots.filter(function (slot) {
        return !onlyRender || slot.render === onlyRender;
      });
      if (!shown.length) return;
      var box = el("div", "group"), slots = el("div", "slots");
      var name = el("div", "method", group.method);
      name.title = group.method;
      box.appendChild(name);
      shown.forEach(function (slot) {
        slots.appendChild(thumbnail(target[3][slot.index], slot));
      });
      box.appendChild(slots);
      grid.appendChild(box);
    });
    cell.appendChild(grid);
    return cell;
  }
  function targetCells(row, target, onlyRender) {
    var cell = el("td", "class"), info = target[4];
    if (info !== undefined) {  // a named target: its description, e.g. "unit:2 = 0.73"
      cell.appendChild(el("span", "description", info[1]));
      if (info[0]) cell.title = info[0];
    } else {
      cell.appendChild(el("span", "label", target[1] === null ? "class " + target[0]
                                                              : target[1]));
      if (target[1] !== null) cell.appendChild(el("span", "index", "#" + target[0]));
    }
    row.appendChild(cell);
    cell = el("td", "score");
    // Every score in one format (its full value in the tooltip); a probability gets its
    // bar, another target's value (a unit, a region's summed logits, a cosine similarity,
    // a detection's IoU x class score) is the number alone.
    var probability = info === undefined || info[2] === "class";
    if (target[2] !== null) {
      cell.appendChild(document.createTextNode(scoreText(target[2])));
      cell.title = String(target[2]);
    }
    if (target[2] !== null && probability) {
      var bar = el("span", "bar"), fill = el("span");
      fill.style.width = Math.max(0, Math.min(100, target[2] * 100)) + "%";
      bar.appendChild(fill);
      cell.appendChild(bar);
    }
    row.appendChild(cell);
    if (columns.length) row.appendChild(mapsCell(target, onlyRender));
  }
  // Three decimals, as the panels' captions write a probability; tiny and huge values in
  // powers of ten.
  function scoreText(score) {
    var size = Math.abs(score);
    return score === 0 || (size >= 0.01 && size < 1e6) ? score.toFixed(3)
        : score.toExponential(size < 1 ? 1 : 3);
  }
  // A name that may break after each "/" (and, when a part is longer than its cell,
  // anywhere), never in the middle of a short word.
  function pathText(text) {
    var span = el("span", "name");
    text.split("/").forEach(function (part, i, parts) {
      span.appendChild(document.createTextNode(part + (i < parts.length - 1 ? "/" : "")));
      if (i < parts.length - 1) span.appendChild(el("wbr"));
    });
    return span;
  }
  function recordRows(index, choice, onlyRender) {
    var record = records[index], targets = record[3], body = el("tbody", "record");
    var first = el("tr", "row"), span = Math.max(targets.length, 1);
    var shown = targetOf(record, choice);
    first.dataset.index = String(index + 1);
    first.dataset.status = record[1];
    first.dataset.class = shown && shown[0] !== null ? String(shown[0]) : "";
    if (named) first.dataset.target = shown && shown[4] !== undefined ? shown[4][0] : "";
    first.dataset.score = shown && shown[2] !== null ? String(shown[2]) : "";
    first.dataset.classes = targets.map(function (t) { return t[0]; }).join(" ");
    var number = el("td", "num", thousands(index + 1)), name = el("td", "input");
    var status = el("td", "status");
    number.rowSpan = name.rowSpan = status.rowSpan = span;
    name.appendChild(pathText(record[0]));
    if (record[5]) name.title = record[5];  // a packaged sample's full path
    if (record[2] !== null && targets.length) name.appendChild(el("div", "reason", record[2]));
    var caveats = record[4] || [];
    if (caveats.length) {
      var list = el("ul", "caveats");
      caveats.forEach(function (caveat) {
        var item = el("li", "caveat");
        item.dataset.code = caveat[0];
        item.appendChild(el("span", "badge caveat", caveat[0]));
        item.appendChild(document.createTextNode(" "));
        if (caveat[2] !== null && caveat[1].indexOf(caveat[2] + " ") !== 0) {  // unnamed
          item.appendChild(el("span", "method", caveat[2] + ": "));
        }
        item.appendChild(el("span", "text", caveat[1]));
        list.appendChild(item);
      });
      name.appendChild(list);
    }
    var known = ["ok", "error", "skipped"].indexOf(record[1]) >= 0;
    status.appendChild(el("span", "badge " + (known ? record[1] : "other"), record[1]));
    first.appendChild(number);
    first.appendChild(name);
    first.appendChild(status);
    body.appendChild(first);
    if (!targets.length) {
      var reason = el("td", "reason", record[2] === null ? "no maps" : record[2]);
      reason.colSpan = 2 + (columns.length ? 1 : 0);
      first.appendChild(reason);
      return body;
    }
    targets.forEach(function (target, k) {
      var row = k ? el("tr", "target") : first;
      if (filtered(choice) && targets.length > 1 && fits(target, choice)) {
        row.classList.add("match");
      }
      targetCells(row, target, onlyRender);
      if (k) body.appendChild(row);
    });
    return body;
  }
  function drawPager(pager, page, pages, from, to, total) {
    pager.textContent = "";
    [["first", "\u00ab first", 1], ["previous", "\u2039 previous", page - 1],
     ["next", "next \u203a", page + 1], ["last", "last \u00bb", pages]].forEach(function (b) {
      var button = el("button", b[0], b[1]);
      button.type = "button";
      button.disabled = b[2] < 1 || b[2] > pages || b[2] === page;
      button.addEventListener("click", function () { go({page: b[2]}); });
      pager.appendChild(button);
      if (b[0] === "previous") pager.appendChild(el("span", "page", "page " +
          thousands(page) + " of " + thousands(pages)));
    });
    var count = total ? "rows " + thousands(from) + "\u2013" + thousands(to) + " of " +
        thousands(total) : "no rows";
    if (total !== records.length) count += " (" + thousands(records.length) + " in all)";
    pager.appendChild(el("span", "count", count));
  }
  function render() {
    var state = readState(), list = matching(state), choice = chosen(state);
    var pages = Math.max(1, Math.ceil(list.length / PAGE_SIZE));
    var page = Math.min(state.page, pages), start = (page - 1) * PAGE_SIZE;
    var shown = list.slice(start, start + PAGE_SIZE);
    statusFilter.value = state.status;
    classFilter.value = state.cls;
    targetFilter.value = state.target;
    caveatFilter.value = state.caveat;
    renderFilter.value = state.render;
    sortSelect.value = state.sort;
    if (search.value !== state.q && document.activeElement !== search) search.value = state.q;
    Array.prototype.slice.call(table.tBodies).forEach(function (b) { b.remove(); });
    var fragment = document.createDocumentFragment();
    shown.forEach(function (index) {
      fragment.appendChild(recordRows(index, choice, state.render));
    });
    if (!shown.length) {
      var body = el("tbody"), row = el("tr"), cell = el("td", "empty",
          records.length ? "No inputs match this view." : "The manifest has no records.");
      cell.colSpan = 5 + (columns.length ? 1 : 0);
      row.appendChild(cell);
      body.appendChild(row);
      fragment.appendChild(body);
    }
    table.appendChild(fragment);
    drawPager(byId("pager"), page, pages, start + 1, start + shown.length, list.length);
    drawPager(byId("pager-bottom"), page, pages, start + 1, start + shown.length, list.length);
    document.body.dataset.ready = "true";
  }

  setUp();
  statusFilter.addEventListener("change", function () { go({status: statusFilter.value}); });
  classFilter.addEventListener("change", function () { go({cls: classFilter.value}); });
  targetFilter.addEventListener("change", function () { go({target: targetFilter.value}); });
  caveatFilter.addEventListener("change", function () { go({caveat: caveatFilter.value}); });
  renderFilter.addEventListener("change", function () { go({render: renderFilter.value}); });
  byId("viewer-close").addEventListener("click", function () { byId("viewer").close(); });
  byId("viewer").addEventListener("click", function (event) {  // a click beside the figure
    if (event.target === event.currentTarget) event.currentTarget.close();
  });
  sortSelect.addEventListener("change", function () { go({sort: sortSelect.value}); });
  search.addEventListener("input", function () { go({q: search.value}, true); });
  window.addEventListener("hashchange", render);
  render();
})();
