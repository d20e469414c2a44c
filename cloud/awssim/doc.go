// Package awssim is a simulator of the AWS APIs gpubroker's cloud provider
// uses: EC2 Auto Scaling (the awsquery protocol, version 2011-01-01) and EC2
// DescribeInstances (the ec2query protocol, version 2016-11-15), served over
// HTTP so the real aws-sdk-go-v2 clients run against it unchanged.
//
// It speaks the wire formats the SDK expects: form-encoded requests with
// Action and Version, XML responses in the services' namespaces, error
// bodies (<ErrorResponse><Error><Type><Code><Message> for autoscaling,
// <Response><Errors><Error><Code><Message> for EC2) with the right HTTP
// status, and an x-amzn-RequestId header on every answer. Groups launch
// instances to match their desired capacity: an instance is Pending for a
// launch delay, then InService, and after a boot delay the BootHook is
// called so test or demo wiring can turn it into a Kubernetes node (KWOK)
// or a YARN NodeManager (yarnsim). Termination goes through Terminating to
// terminated and calls the TerminateHook.
//
// Faults can be injected: throttling bursts, launches that fail with
// insufficient capacity (recorded as failed scaling activities, as AWS
// does, and retried later), slow launches, instances that never register,
// and a terminate that takes effect but answers with a server error.
//
// It keeps all state in memory behind one mutex and is meant for a few
// thousand instances.
package awssim
