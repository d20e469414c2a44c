package awssim

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
)

// ec2 answers one ec2query action. s.mu is held.
func (s *Server) ec2(action string, form url.Values) (any, *apiError) {
	if action == "DescribeInstances" {
		return s.describeInstances(form)
	}
	return nil, &apiError{status: http.StatusBadRequest, code: "InvalidAction", message: fmt.Sprintf("The action %s is not valid for this web service.", action), sender: true}
}

// EC2 instance state codes.
var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

type ec2Item struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type ec2Instance struct {
	InstanceID    string `xml:"instanceId"`
	ImageID       string `xml:"imageId"`
	InstanceState struct {
		Code int    `xml:"code"`
		Name string `xml:"name"`
	} `xml:"instanceState"`
	PrivateDNSName string `xml:"privateDnsName"`
	DNSName        string `xml:"dnsName"`
	InstanceType   string `xml:"instanceType"`
	LaunchTime     string `xml:"launchTime"`
	Placement      struct {
		AvailabilityZone string `xml:"availabilityZone"`
		Tenancy          string `xml:"tenancy"`
	} `xml:"placement"`
	PrivateIPAddress string    `xml:"privateIpAddress,omitempty"`
	Architecture     string    `xml:"architecture"`
	TagSet           []ec2Item `xml:"tagSet>item"`
}

type ec2Reservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Instances     []ec2Instance `xml:"instancesSet>item"`
}

type describeInstancesResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	Reservations []ec2Reservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

func (r *describeInstancesResponse) setRequestID(id string) { r.RequestID = id }

func (s *Server) describeInstances(form url.Values) (any, *apiError) {
	ids := members(form, "InstanceId")
	maxResults := form.Get("MaxResults")
	if len(ids) > 0 && maxResults != "" {
		return nil, &apiError{status: 400, code: "InvalidParameterCombination", message: "The parameter instancesSet cannot be used with the parameter maxResults", sender: true}
	}
	var stateFilter map[string]bool
	for i := 1; ; i++ {
		p := fmt.Sprintf("Filter.%d", i)
		name, ok := form[p+".Name"]
		if !ok {
			break
		}
		if name[0] != "instance-state-name" {
			return nil, &apiError{status: 400, code: "InvalidParameterValue", message: fmt.Sprintf("The filter '%s' is not supported by this simulator", name[0]), sender: true}
		}
		stateFilter = map[string]bool{}
		for _, v := range members(form, p+".Value") {
			stateFilter[v] = true
		}
	}
	var chosen []string
	if len(ids) > 0 {
		for _, id := range ids {
			if _, ok := s.instances[id]; !ok {
				return nil, &apiError{status: 400, code: "InvalidInstanceID.NotFound", message: fmt.Sprintf("The instance ID '%s' does not exist", id), sender: true}
			}
			chosen = append(chosen, id)
		}
		sort.Strings(chosen)
	} else {
		for id := range s.instances {
			chosen = append(chosen, id)
		}
		sort.Strings(chosen)
	}
	if stateFilter != nil {
		kept := chosen[:0]
		for _, id := range chosen {
			if stateFilter[s.instances[id].state] {
				kept = append(kept, id)
			}
		}
		chosen = kept
	}
	next := ""
	if len(ids) == 0 {
		limit := 1000
		if maxResults != "" {
			n, err := strconv.Atoi(maxResults)
			if err != nil || n < 5 || n > 1000 {
				return nil, &apiError{status: 400, code: "InvalidParameterValue", message: fmt.Sprintf("Value ( %s ) for parameter maxResults is invalid. Expecting a value between 5 and 1000.", maxResults), sender: true}
			}
			limit = n
		}
		var aerr *apiError
		chosen, next, aerr = page(chosen, form.Get("NextToken"), limit)
		if aerr != nil {
			aerr.code = "InvalidParameterValue"
			return nil, aerr
		}
	}
	resp := &describeInstancesResponse{Xmlns: ec2Namespace, NextToken: next}
	for _, id := range chosen {
		in := s.instances[id]
		x := ec2Instance{
			InstanceID: in.ID, ImageID: "ami-0abcdef1234567890", PrivateDNSName: in.PrivateDNSName,
			InstanceType: in.InstanceType, LaunchTime: timestamp(in.LaunchTime),
			PrivateIPAddress: in.PrivateIP, Architecture: "x86_64",
		}
		x.InstanceState.Name, x.InstanceState.Code = in.state, stateCodes[in.state]
		x.Placement.AvailabilityZone, x.Placement.Tenancy = in.zone, "default"
		if in.state == "terminated" {
			// EC2 clears the address of terminated instances.
			x.PrivateDNSName, x.PrivateIPAddress = "", ""
		}
		keys := make([]string, 0, len(in.Tags))
		for k := range in.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			x.TagSet = append(x.TagSet, ec2Item{Key: k, Value: in.Tags[k]})
		}
		resp.Reservations = append(resp.Reservations, ec2Reservation{
			ReservationID: "r-" + in.ID[2:], OwnerID: s.cfg.AccountID, Instances: []ec2Instance{x},
		})
	}
	return resp, nil
}
