"""A trained model put to use and watched: evaluation, ONNX export, the policy server, Prometheus
metrics, and the HTTP limits, bind rule and throttle every server here shares."""
