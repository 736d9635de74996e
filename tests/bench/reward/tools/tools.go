//go:build tools

// Package tools pins the HTTP load generator used by the reward-service load test.
package tools

import _ "github.com/tsenart/vegeta/v12"
