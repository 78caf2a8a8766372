"""What the RocketMQ front ends (remoting now, gRPC and HTTP later) share: the topic and
group registries on the store's metadata (:mod:`gateway.rocketmq.topics`,
:mod:`gateway.rocketmq.groups`). The naming model itself is :mod:`lmq.rocketmq`."""
