"""EC2 set-up for tests/aws_driver.rs against a moto server, through boto3 (an
independent client: the driver under test only reads what this creates).

    moto_ec2.py ENDPOINT REGION run KEY=VALUE [COUNT]   prints the new instance ids
    moto_ec2.py ENDPOINT REGION terminate ID...
    moto_ec2.py ENDPOINT REGION stop|start ID...
    moto_ec2.py ENDPOINT REGION state ID                prints the instance's state name

Fake credentials are passed explicitly; nothing is read from the environment.
"""

import sys

import boto3


def main() -> None:
    endpoint, region, op, *args = sys.argv[1:]
    ec2 = boto3.client(
        "ec2",
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing-secret",
    )
    if op == "run":
        key, value = args[0].split("=", 1)
        count = int(args[1]) if len(args) > 1 else 1
        reply = ec2.run_instances(
            ImageId="ami-12c6146b",
            MinCount=count,
            MaxCount=count,
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": [{"Key": key, "Value": value}]}
            ],
        )
        for instance in reply["Instances"]:
            print(instance["InstanceId"])
    elif op == "terminate":
        ec2.terminate_instances(InstanceIds=args)
    elif op == "stop":
        ec2.stop_instances(InstanceIds=args)
    elif op == "start":
        ec2.start_instances(InstanceIds=args)
    elif op == "state":
        reply = ec2.describe_instances(InstanceIds=args)
        print(reply["Reservations"][0]["Instances"][0]["State"]["Name"])
    else:
        sys.exit(f"unknown operation {op}")


if __name__ == "__main__":
    main()
