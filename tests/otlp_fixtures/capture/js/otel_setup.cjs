// Common OpenTelemetry setup. Resolves packages from the caller's directory (process.cwd()).
// setup(name, encoding) with encoding 'json' | 'proto' | 'grpc'.
// json/proto: exported through the capture proxy (saves captures/<name>/NNN.*, forwards to keelwave).
// grpc: exported straight to keelwave's gRPC port, plus a JSON copy saved (not forwarded) by the proxy.
const { createRequire } = require('module');
const path = require('path');
const req = createRequire(path.join(process.cwd(), 'x.js'));
const api = req('@opentelemetry/api');
const { NodeTracerProvider } = req('@opentelemetry/sdk-trace-node');
const { BatchSpanProcessor } = req('@opentelemetry/sdk-trace-base');
const { resourceFromAttributes } = req('@opentelemetry/resources');

const KEY = process.env.KEELWAVE_API_KEY;
const PROXY = 'http://127.0.0.1:18999';
const GRPC = process.env.KW_GRPC || 'http://127.0.0.1:14317';

function bsp(exporter) {
  return new BatchSpanProcessor(exporter, { maxExportBatchSize: Number(process.env.BATCH || 5), scheduledDelayMillis: 200 });
}

function setup(name, encoding, serviceName) {
  const headers = { Authorization: `Bearer ${KEY}` };
  const processors = [];
  if (encoding === 'json') {
    const { OTLPTraceExporter } = req('@opentelemetry/exporter-trace-otlp-http');
    processors.push(bsp(new OTLPTraceExporter({ url: `${PROXY}/cap/${name}/v1/traces`, headers })));
  } else if (encoding === 'proto') {
    const { OTLPTraceExporter } = req('@opentelemetry/exporter-trace-otlp-proto');
    processors.push(bsp(new OTLPTraceExporter({ url: `${PROXY}/cap/${name}/v1/traces`, headers })));
  } else if (encoding === 'grpc') {
    const { OTLPTraceExporter } = req('@opentelemetry/exporter-trace-otlp-grpc');
    const grpc = req('@grpc/grpc-js');
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${KEY}`);
    processors.push(bsp(new OTLPTraceExporter({ url: GRPC, metadata: md })));
    const H = req('@opentelemetry/exporter-trace-otlp-http');
    processors.push(bsp(new H.OTLPTraceExporter({ url: `${PROXY}/save/${name}/v1/traces`, headers })));
  } else throw new Error('encoding ' + encoding);
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': serviceName || name }),
    spanProcessors: processors,
  });
  provider.register();
  return { provider, api, req };
}

module.exports = { setup };
