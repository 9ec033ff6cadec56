"""quiver_proxy: RocketMQ 5's gRPC MessagingService in front of a Quiver cluster (RocketMQ 5 clients connect
unchanged). A client of the brokers through Quiver's SDK: it holds no messages."""
