// check_kubernetes.js: packaging/kubernetes/*.yaml checked offline.
//
//   node tests/packaging/check_kubernetes.js TOOLS_NODE_MODULES MANIFEST_DIR
//
// Every document is parsed (js-yaml) and validated against the Kubernetes
// OpenAPI schema of its apiVersion and kind by the kubernetes-models package
// (types, required fields, enums, formats; tools/package.json pins both).
// Kubernetes' own schemas allow unknown fields, so that part is the API
// server's; what the files promise each other is checked here instead:
// selectors match their pod template's labels, a Service selects a
// workload and its target ports are named container ports, probes name a
// container port, every Secret, key and PersistentVolumeClaim a pod refers
// to is defined, every volume mounted is declared, the coordinator is a
// one-replica StatefulSet with a claim template and the agents request
// nvidia.com/gpu.
//
// Then it breaks a copy of the manifests in known ways and fails unless each
// break is reported, so the check itself cannot pass vacuously.
// Exit 0 when all is well, 1 with one line per problem otherwise.
"use strict";

const fs = require("fs");
const path = require("path");

const [toolsModules, dir] = process.argv.slice(2);
if (!toolsModules || !dir) {
	console.error("usage: check_kubernetes.js TOOLS_NODE_MODULES MANIFEST_DIR");
	process.exit(64);
}
function need(name) {
	try {
		return require(path.join(toolsModules, name));
	} catch (e) {
		console.error(`${name} is missing from ${toolsModules}: run scripts/deps (npm ci in tools/): ${e.message}`);
		process.exit(1);
	}
}
const yaml = need("js-yaml");

// apiVersion -> the kubernetes-models module holding its kinds
function modelFor(apiVersion, kind) {
	const group = apiVersion.includes("/") ? apiVersion : `v1`;
	const mod = need(path.join("kubernetes-models", group));
	return mod[kind];
}

function load(folder) {
	const docs = [];
	for (const f of fs.readdirSync(folder).filter((n) => n.endsWith(".yaml")).sort()) {
		const text = fs.readFileSync(path.join(folder, f), "utf8");
		yaml.loadAll(text, (d) => {
			if (d !== null && d !== undefined)
				docs.push({ file: f, doc: d });
		});
	}
	return docs;
}

function where(d) {
	return `${d.file}: ${d.doc.kind || "?"} ${(d.doc.metadata && d.doc.metadata.name) || "?"}`;
}

function schemaErrors(d, out) {
	const { apiVersion, kind } = d.doc;
	if (typeof apiVersion !== "string" || typeof kind !== "string") {
		out.push(`${where(d)}: apiVersion and kind are required`);
		return;
	}
	const Model = modelFor(apiVersion, kind);
	if (!Model) {
		out.push(`${where(d)}: no schema for ${apiVersion} ${kind}`);
		return;
	}
	try {
		new Model(d.doc).validate();
	} catch (e) {
		out.push(`${where(d)}: ${e.message}`);
	}
}

const WORKLOADS = new Set(["StatefulSet", "DaemonSet", "Deployment", "Job"]);

function subset(sel, labels) {
	return Object.entries(sel || {}).every(([k, v]) => labels && labels[k] === v);
}

function crossErrors(docs, out) {
	const byKind = (k) => docs.filter((d) => d.doc.kind === k);
	const secrets = new Map(byKind("Secret").map((d) => [d.doc.metadata.name,
		new Set(Object.keys(Object.assign({}, d.doc.data, d.doc.stringData)))]));
	const claims = new Set(byKind("PersistentVolumeClaim").map((d) => d.doc.metadata.name));
	const workloads = docs.filter((d) => WORKLOADS.has(d.doc.kind));
	for (const d of workloads) {
		const spec = d.doc.spec || {};
		const tmpl = (spec.template || {}).metadata || {};
		const pod = (spec.template || {}).spec || {};
		if (d.doc.kind !== "Job" && !subset((spec.selector || {}).matchLabels, tmpl.labels))
			out.push(`${where(d)}: spec.selector.matchLabels does not match the pod template's labels`);
		const templated = new Set((spec.volumeClaimTemplates || []).map((c) => c.metadata.name));
		const volumes = new Set((pod.volumes || []).map((v) => v.name));
		for (const v of pod.volumes || []) {
			if (v.secret && !secrets.has(v.secret.secretName))
				out.push(`${where(d)}: volume ${v.name} names Secret ${v.secret.secretName}, which is not defined`);
			if (v.persistentVolumeClaim && !claims.has(v.persistentVolumeClaim.claimName))
				out.push(`${where(d)}: volume ${v.name} names claim ${v.persistentVolumeClaim.claimName}, which is not defined`);
		}
		for (const c of [].concat(pod.initContainers || [], pod.containers || [])) {
			const ports = new Set((c.ports || []).map((p) => p.name));
			for (const m of c.volumeMounts || [])
				if (!volumes.has(m.name) && !templated.has(m.name))
					out.push(`${where(d)}: container ${c.name} mounts ${m.name}, which is neither a volume nor a claim template`);
			for (const e of c.env || []) {
				const ref = e.valueFrom && e.valueFrom.secretKeyRef;
				if (ref && !(secrets.has(ref.name) && secrets.get(ref.name).has(ref.key)))
					out.push(`${where(d)}: env ${e.name} reads key ${ref.key} of Secret ${ref.name}, which is not defined`);
			}
			for (const probe of ["readinessProbe", "livenessProbe", "startupProbe"]) {
				const p = c[probe] && (c[probe].httpGet || c[probe].tcpSocket);
				if (p && typeof p.port === "string" && !ports.has(p.port))
					out.push(`${where(d)}: container ${c.name} ${probe} names port ${p.port}, which it does not declare`);
			}
		}
	}
	for (const s of byKind("Service")) {
		const targets = workloads.filter((w) => subset(s.doc.spec.selector, ((w.doc.spec.template || {}).metadata || {}).labels));
		if (targets.length === 0) {
			out.push(`${where(s)}: its selector matches no workload's pods`);
			continue;
		}
		const named = new Set();
		for (const w of targets)
			for (const c of w.doc.spec.template.spec.containers)
				for (const p of c.ports || [])
					named.add(p.name);
		for (const p of s.doc.spec.ports || [])
			if (typeof p.targetPort === "string" && !named.has(p.targetPort))
				out.push(`${where(s)}: port ${p.name} targets ${p.targetPort}, which no selected container declares`);
	}
	// what ringmaster needs of them (docs/kubernetes.md)
	const coord = byKind("StatefulSet");
	if (coord.length !== 1 || coord[0].doc.spec.replicas !== 1 || !(coord[0].doc.spec.volumeClaimTemplates || []).length)
		out.push("the coordinator must be one StatefulSet with replicas: 1 and a volumeClaimTemplate for its database");
	const agents = byKind("DaemonSet");
	const gpu = agents.some((d) => d.doc.spec.template.spec.containers.some((c) =>
		c.resources && c.resources.limits && c.resources.limits["nvidia.com/gpu"] !== undefined));
	if (!gpu)
		out.push("the agents (a DaemonSet) must request nvidia.com/gpu");
	if (![...claims].some((n) => byKind("PersistentVolumeClaim").some((d) => d.doc.metadata.name === n &&
		d.doc.spec.accessModes.includes("ReadWriteMany"))))
		out.push("a ReadWriteMany claim for the shared checkpoints is missing");
}

function check(docs) {
	const out = [];
	for (const d of docs)
		schemaErrors(d, out);
	crossErrors(docs, out);
	return out;
}

const docs = load(dir);
if (docs.length === 0) {
	console.error(`no YAML documents in ${dir}`);
	process.exit(1);
}
const problems = check(docs);
for (const p of problems)
	console.log(`FAIL ${p}`);
console.log(`${docs.length} documents in ${dir}: ${problems.length} problem(s)`);

// Breaks that must be found (each on a fresh copy).
const find = (kind) => (ds) => ds.find((d) => d.doc.kind === kind).doc;
const breaks = [
	["a port that is not an integer", (ds) => { find("Service")(ds).spec.ports[0].port = "https"; }],
	["a missing required field (a container's name)", (ds) => { delete find("StatefulSet")(ds).spec.template.spec.containers[0].name; }],
	["an unknown enum value", (ds) => { find("Service")(ds).spec.ports[0].protocol = "QUIC"; }],
	["a selector that does not match", (ds) => { find("DaemonSet")(ds).spec.selector.matchLabels["app.kubernetes.io/component"] = "x"; }],
	["an undefined Secret key", (ds) => { find("DaemonSet")(ds).spec.template.spec.containers[0].env.find((e) => e.valueFrom && e.valueFrom.secretKeyRef).valueFrom.secretKeyRef.key = "nope"; }],
	["an undefined claim", (ds) => { find("DaemonSet")(ds).spec.template.spec.volumes.find((v) => v.persistentVolumeClaim).persistentVolumeClaim.claimName = "nope"; }],
	["two coordinator replicas", (ds) => { find("StatefulSet")(ds).spec.replicas = 2; }],
];
let missed = 0;
for (const [what, mutate] of breaks) {
	const copy = JSON.parse(JSON.stringify(docs));
	mutate(copy);
	const found = check(copy);
	if (found.length === 0) {
		console.log(`FAIL the check did not see ${what}`);
		missed++;
	} else {
		console.log(`ok: ${what} is reported: ${found[0]}`);
	}
}
process.exit(problems.length || missed ? 1 : 0);
