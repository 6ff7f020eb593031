// The package is reported once, at its first file in name order.
package mystery
