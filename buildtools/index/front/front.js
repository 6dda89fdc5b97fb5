// The install selector of the index's front page (buildtools/index/front.py inlines it; the
// page's Content-Security-Policy allows exactly this text by its sha256, and requires
// Trusted Types: nothing here writes HTML, only text and attributes).
//
// The page works without it: every published combination is listed with its commands.
// This script reads the same commands from the page's JSON data block, shows the one of
// the chosen combination, and for a combination that is not published the nearest one.
(function () {
  "use strict";
  var dataNode = document.getElementById("bt-data");
  var form = document.getElementById("selector");
  if (!dataNode || !form) return;
  var data = JSON.parse(dataNode.textContent);
  var AXES = ["project", "torch", "accelerator", "python", "platform"];
  // how far apart two combinations are: an axis outweighs every axis after it
  var WEIGHT = { project: 10000, platform: 1000, accelerator: 100, torch: 10, python: 1 };
  var PLACEHOLDER = "<site-url>";

  function siteBase() {
    if (location.protocol !== "http:" && location.protocol !== "https:") return null;
    return new URL(".", location.href).href.replace(/\/$/, "");
  }
  var base = siteBase();

  function shellWord(text) {
    return /^[A-Za-z0-9_@%+=:,.\/-]+$/.test(text) ? text : "'" + text.replace(/'/g, "'\"'\"'") + "'";
  }

  // commands of a site with relative links name it by a placeholder: the page knows its URL
  function fill(text, shell) {
    if (base === null || text.indexOf(PLACEHOLDER) < 0) return text;
    return text.split(PLACEHOLDER).join(shell ? shellWord(base) : base);
  }

  var nodes = document.querySelectorAll("[data-fill]");
  for (var n = 0; n < nodes.length; n++) {
    nodes[n].textContent = fill(nodes[n].textContent, nodes[n].getAttribute("data-fill") === "shell");
  }

  // the options of each axis, in the page's order (the order distances are measured in)
  var order = {};
  AXES.forEach(function (axis) {
    order[axis] = {};
    var inputs = form.querySelectorAll('input[name="' + axis + '"]');
    for (var i = 0; i < inputs.length; i++) order[axis][inputs[i].value] = i;
  });

  var combos = data.combos.map(function (c) {
    return { project: c[0], torch: c[1], accelerator: c[2], python: c[3], platform: c[4], row: c[5], anchor: c[6] };
  });

  function chosen() {
    var pick = {};
    AXES.concat(["installer"]).forEach(function (axis) {
      var input = form.querySelector('input[name="' + axis + '"]:checked');
      pick[axis] = input ? input.value : null;
    });
    return pick;
  }

  function same(combo, pick, skip) {
    return AXES.every(function (axis) { return axis === skip || combo[axis] === pick[axis]; });
  }

  function distance(combo, pick) {
    var d = 0;
    AXES.forEach(function (axis) {
      if (combo[axis] === pick[axis]) return;
      var size = Object.keys(order[axis]).length || 1;
      var gap = Math.abs((order[axis][combo[axis]] || 0) - (order[axis][pick[axis]] || 0));
      d += WEIGHT[axis] * (1 + gap / size);
    });
    return d;
  }

  function nearest(pick) {
    var best = null, bestD = Infinity;
    combos.forEach(function (combo) {
      var d = distance(combo, pick);
      if (d < bestD) { best = combo; bestD = d; }
    });
    return best;
  }

  function label(axis, value) {
    var input = form.querySelector('input[name="' + axis + '"][value="' + CSS.escape(value) + '"]');
    var node = input && form.querySelector('label[for="' + input.id + '"]');
    return node ? node.textContent : value;
  }

  function describe(combo) {
    var parts = [];
    if (Object.keys(order.project).length > 1) parts.push(label("project", combo.project));
    parts.push("torch " + label("torch", combo.torch), label("accelerator", combo.accelerator),
      "Python " + label("python", combo.python), label("platform", combo.platform));
    return parts.join(" · ");
  }

  function select(combo) {
    AXES.forEach(function (axis) {
      var input = form.querySelector('input[name="' + axis + '"][value="' + CSS.escape(combo[axis]) + '"]');
      if (input) input.checked = true;
    });
    update();
  }

  var status = document.getElementById("status");
  var command = document.getElementById("command");
  var altLabel = document.getElementById("alt-label");
  var altCode = document.getElementById("alt-code");
  var copy = document.getElementById("copy");

  function markUnpublished(pick) {
    AXES.forEach(function (axis) {
      var inputs = form.querySelectorAll('input[name="' + axis + '"]');
      for (var i = 0; i < inputs.length; i++) {
        var probe = Object.assign({}, pick);
        probe[axis] = inputs[i].value;
        var found = combos.some(function (c) { return same(c, probe); });
        var node = form.querySelector('label[for="' + inputs[i].id + '"]');
        if (node) node.classList.toggle("unpublished", !found);
      }
    });
  }

  function update() {
    var pick = chosen();
    markUnpublished(pick);
    var combo = combos.find(function (c) { return same(c, pick); }) || null;
    while (status.firstChild) status.removeChild(status.firstChild);
    status.className = "status";
    var shown = combo;
    if (combo) {
      var row = data.rows[combo.row];
      status.appendChild(document.createTextNode(
        describe(combo) + ": " + row.project + " " + row.versions + " "));
      var link = document.createElement("a");
      link.href = "#" + combo.anchor;
      link.textContent = "(in the list)";
      status.appendChild(link);
    } else {
      shown = nearest(pick);
      status.className = "status missing";
      status.setAttribute("data-nearest", shown ? shown.anchor : "");
      var want = Object.assign({}, pick);
      status.appendChild(document.createTextNode(
        "Not published: " + describe(want) + ". " +
        (shown ? "Nearest published: " + describe(shown) + " (its command below)." : "")));
      if (shown) {
        var use = document.createElement("button");
        use.type = "button";
        use.id = "use-nearest";
        use.textContent = "Select it";
        use.addEventListener("click", function () { select(shown); });
        status.appendChild(use);
      }
    }
    if (!shown) {
      command.textContent = "";
      return;
    }
    var cmds = data.rows[shown.row];
    var uv = pick.installer === "uv";
    command.textContent = fill(uv ? cmds.uv : cmds.pip, true);
    altLabel.textContent = uv
      ? (cmds.uv_variants
        ? "Or let uv pick the variant for this machine (wheel variants, a uv preview), or in a uv project (pyproject.toml):"
        : "Or in a uv project (pyproject.toml):")
      : "Or from the PEP 503 index of the same wheels:";
    altCode.textContent = uv && cmds.uv_variants
      ? fill(cmds.uv_variants, true) + "\n\n" + fill(cmds.uv_project, false)
      : fill(uv ? cmds.uv_project : cmds.pip_index, !uv);
  }

  copy.addEventListener("click", function () {
    var text = command.textContent;
    function done() {
      copy.textContent = "Copied";
      setTimeout(function () { copy.textContent = "Copy"; }, 1500);
    }
    function fallback() {
      var range = document.createRange();
      range.selectNodeContents(command);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      if (document.execCommand("copy")) done();
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, fallback);
    } else {
      fallback();
    }
  });

  form.addEventListener("change", update);
  form.addEventListener("submit", function (event) { event.preventDefault(); });
  var start = combos[data.default] || combos[0];
  var wanted = decodeURIComponent(location.hash.slice(1));
  combos.forEach(function (c) { if (c.anchor === wanted) start = c; });
  var note = document.getElementById("nojs");
  if (!start) return; // nothing published: the page says so
  if (note) note.hidden = true;
  form.hidden = false;
  select(start);
})();
